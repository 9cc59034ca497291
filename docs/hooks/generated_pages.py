"""MkDocs hook: the pages that are generated rather than written.

- `index.md`: the home page is README.md itself, its `docs/…` links made relative to the site;
- `reference/cli.md`: every command and option, from the argparse parsers (cli_reference.py);
- `reports/published.md`: the published reports, from their env.json files (reports_index.py);
- `reports/<folder>/…`: each published report's own pages, plots and HTML, served as they are.

Both generators live beside this file and run at every build, so the guide cannot
describe an option or a report that does not exist.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.structure.files import File, Files

sys.path.insert(0, str(Path(__file__).parent))
import cli_reference  # noqa: E402
import reports_index  # noqa: E402


def _add(files: Files, config, src_uri: str, *, content: str | None = None, abs_src_path: str | None = None) -> None:
    if content is not None:
        files.append(File.generated(config, src_uri, content=content))
    else:
        files.append(File.generated(config, src_uri, abs_src_path=abs_src_path))


ROOT = Path(__file__).resolve().parents[2]


def home_page() -> str:
    """README.md with its links into docs/ made relative to the site's root, where it sits."""
    return (ROOT / "README.md").read_text(encoding="utf-8").replace("](docs/", "](")


def on_files(files: Files, config) -> Files:
    _add(files, config, "index.md", content=home_page())
    _add(files, config, "reference/cli.md", content=cli_reference.render())
    _add(files, config, "reports/published.md", content=reports_index.render())
    for path in reports_index.served_files():
        _add(files, config, "reports/" + path.relative_to(reports_index.REPORTS).as_posix(), abs_src_path=str(path))
    return files
