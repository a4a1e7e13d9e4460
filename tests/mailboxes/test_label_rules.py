"""What a mailbox's labels and address take, for every door (mailboxes.lifecycle.labels_checked,
mailboxes.lifecycle.local_part_checked): kept as each door keeps them, or the field named.
tests/api/agents/test_mcp.py checks the API and MCP answer with these words."""
import pytest

from mailboxes.errors import InvalidRequest
from mailboxes.lifecycle import labels_checked, local_part_checked


def test_labels_are_kept_as_given_a_repeated_tag_once_and_metadata_as_compact_json():
    assert labels_checked({"name": "", "tags": ["b", "a", "b"], "metadata": {"k": [1, "é"]}}) == {
        "name": "", "tags": ["b", "a"], "metadata": '{"k":[1,"é"]}'}
    assert labels_checked({"other": 1}) == {}, "only labels are read"


@pytest.mark.parametrize("labels, field, words", [
    ({"name": "a\nb"}, "name", "must be one line"),
    ({"name": "x" * 101}, "name", "takes at most 100 characters."),
    ({"tags": ["t"] * 11}, "tags", "takes at most 10 tags."),
    ({"tags": ["ok", " ok "]}, "tags", "item 1: a tag is 1 to 32"),
    ({"tags": ["ok", 3]}, "tags", "item 1: a tag is 1 to 32"),
    ({"metadata": ["not", "an", "object"]}, "metadata", "metadata must be a JSON object."),
    ({"metadata": {"k": "x" * 5000}}, "metadata", "metadata must be at most 4096 bytes as JSON"),
])
def test_a_wrong_label_is_named(labels, field, words):
    with pytest.raises(InvalidRequest) as refused:
        labels_checked(labels)
    assert refused.value.field == field and refused.value.message.startswith(words), refused.value.message


def test_a_local_part_is_lowercased_and_a_dot_atom_of_1_to_64():
    assert local_part_checked("Desk.Team") == "desk.team"
    for wrong in ("", "a..b", ".a", "a.", "x" * 65, "a b", "ü"):
        with pytest.raises(InvalidRequest) as refused:
            local_part_checked(wrong)
        assert refused.value.field == "local_part"
