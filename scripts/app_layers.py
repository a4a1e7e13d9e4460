"""How tall the apps' import graph stands (docs/architecture.md, "The ground floor"): for
each app, the longest chain of app-to-app imports below it, counting itself, and which apps
it imports; then the tallest chain and how many apps import core/ directly.

    .venv/bin/python scripts/app_layers.py

The apps are .importlinter's root packages; grimp (import-linter's own graph) reads them."""
import configparser
import functools
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    sys.path.insert(0, str(ROOT))
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    apps = config["importlinter"]["root_packages"].split()
    graph = grimp.build_graph(*apps)
    imports = {app: {other for other in apps if other != app
                     and graph.direct_import_exists(importer=app, imported=other, as_packages=True)}
               for app in apps}

    @functools.lru_cache(None)
    def height(app: str) -> int:
        return 1 + max((height(other) for other in imports[app]), default=0)

    for app in sorted(apps, key=height, reverse=True):
        print(f"{app:10} {height(app):2}  imports {', '.join(sorted(imports[app])) or '-'}")
    print(f"tallest chain: {max(map(height, apps))} apps; "
          f"{sum('core' in imports[app] for app in apps)} of {len(apps) - 1} apps import core/")


if __name__ == "__main__":
    main()
