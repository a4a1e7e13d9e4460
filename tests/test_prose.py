"""Comments say why in a line or two (docs/architecture.md, "Comments"): the apps hold at
most one comment line for five of code, and every module, object or file a comment or a
docstring names exists."""
import ast
import importlib
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

APPS = ("accounts", "api", "checks", "domains", "inbox", "expiry", "mailboxes", "owed", "relay", "webhooks")
MAX_COMMENT_SHARE = 0.2
# A dotted name that starts with an app (relay.ingest.message_ingest), or a file of one
# (relay/ingest.py).
DOTTED = re.compile(r"(?<![\w/.-])(?:%s)(?:\.[A-Za-z_]\w*)+" % "|".join(APPS))
FILE = re.compile(r"(?<![\w/.-])(?:%s|docs|bench|tests|scripts)/[\w/.-]*\w" % "|".join(APPS))
CODE_TOKENS = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
               tokenize.ENCODING, tokenize.ENDMARKER}


def sources(tree: Path = ROOT) -> list[Path]:
    return [path for app in APPS for path in sorted((tree / app).rglob("*.py")) if "migrations" not in path.parts]


def is_tool(node) -> bool:
    """An MCP tool: its docstring is the description agents read, not a comment."""
    return any(getattr(getattr(decorator, "func", decorator), "id", "") == "tool"
               for decorator in getattr(node, "decorator_list", []))


def prose_of(source: str) -> dict[int, str]:
    """Line number → text of each comment and docstring line of `source` (not a tool's)."""
    lines = source.splitlines()
    prose = {tok.start[0]: tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body \
                and not is_tool(node):
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                prose.update({number: lines[number - 1] for number in range(first.lineno, first.end_lineno + 1)})
    return prose


def line_counts(source: str) -> tuple[int, int]:
    """(comment and docstring lines, lines holding code) of `source`; a line of code with a
    comment after it counts as both."""
    prose = prose_of(source)
    code = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in CODE_TOKENS:
            code.update(range(tok.start[0], tok.end[0] + 1))
    docstrings = {number for number, text in prose.items() if not text.lstrip().startswith("#")}
    return len(prose), len(code - docstrings)


def test_the_counter_tells_comments_from_code():
    source = '"""A module.\n\nIts second line."""\nimport os  # why\n\n\ndef f():\n    # one\n    return os.sep\n'
    assert line_counts(source) == (5, 3)  # the import holds code and a comment
    tool = '@tool(output=None)\ndef look():\n    """What an agent reads."""\n    return 1\n'
    assert line_counts(tool) == (0, 4)


def test_comments_are_at_most_a_fifth_of_the_code():
    comments = code = 0
    for path in sources():
        found = line_counts(path.read_text())
        comments, code = comments + found[0], code + found[1]
    assert comments <= MAX_COMMENT_SHARE * code, (
        f"{comments} comment lines against {code} of code ({comments / code:.2f}); "
        f"at most {MAX_COMMENT_SHARE} (say why in a line or two; figures and history go to docs/ and git)")


def resolves(name: str) -> bool:
    """Whether `name` (a.b.c) is a module, or an attribute reached from the longest module
    prefix of it."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                # A field of a model is a descriptor on its class, a dataclass field may not be.
                fields = getattr(getattr(found, "_meta", None), "get_fields", lambda: [])()
                annotations = getattr(found, "__annotations__", {})
                if attribute not in {field.name for field in fields} and attribute not in annotations:
                    return False
                return True
            found = getattr(found, attribute)
        return True
    return False


def names_in_prose(tree: Path = ROOT):
    """(where, name) for each dotted name and file path a comment or a docstring holds."""
    for path in sources(tree):
        for number, text in prose_of(path.read_text()).items():
            where = f"{path.relative_to(tree)}:{number}"
            for name in DOTTED.findall(text):
                yield where, name.rstrip(".")
            for name in FILE.findall(text):
                yield where, name


def test_every_name_a_comment_gives_exists():
    missing = []
    for where, name in names_in_prose():
        known = (ROOT / name).exists() if "/" in name else resolves(name)
        if not known:
            missing.append(f"{where}: {name}")
    assert missing == []


def test_a_stale_name_is_caught(tmp_path):
    assert not resolves("mailboxes.messages.no_such_function")
    assert not resolves("relay.no_such_module")
    assert resolves("relay.ingest.message_ingest") and resolves("mailboxes.models.Mailbox.expires_at")
