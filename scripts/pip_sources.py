"""pip's own package sources on this machine (index mirrors, folders of wheels, constraints: its
configuration files and PIP_* variables), printed as uv's flags, one per line, so that uv
installs from where pip would. Run by scripts/install.sh with the venv's interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys

FLAGS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}


def main() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    seen: set[tuple[str, str]] = set()
    for line in listed.splitlines():
        key, sep, raw = line.partition("=")
        flag = FLAGS.get(key.rsplit(".", 1)[-1])
        if not sep or flag is None:
            continue
        try:
            value = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            value = raw.strip()
        for item in str(value).split():
            if (flag, item) not in seen:
                seen.add((flag, item))
                print(flag)
                print(item)


if __name__ == "__main__":
    main()
