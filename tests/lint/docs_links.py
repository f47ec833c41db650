#!/usr/bin/python3
"""Checks the cross-references of the project's documentation.

usage: docs_links.py ROOT

- Every relative Markdown link in a .md file of ROOT ([text](path),
  [text](path#anchor), [text](#anchor)) names a file or folder that exists,
  and an anchor names a heading of the target file (GitHub's anchors: the
  heading lowercased, its punctuation dropped, spaces made hyphens, "-1",
  "-2" ... after repeats).
- Every docs/<name>.md that a source file (.cc, .h, .py, .sh, .proto, .yaml,
  BUILD, psctl) names exists, and where it is followed by a quoted heading
  (docs/performance-log.md, "Three settling steps") a heading of that file
  begins with the quoted words (a quote that runs on past the line is
  joined with the next line's text, its comment marker dropped).

Prints each broken reference as FILE:LINE: what is wrong, and exits 1 if
there is any; exits 0 and prints a count otherwise.
"""

import functools
import os
import re
import sys

SKIP_DIRS = {".git", ".bazel", "third_party", "node_modules", "runs", ".cache"}
SOURCE_SUFFIXES = (".cc", ".h", ".py", ".sh", ".proto", ".yaml")
SOURCE_NAMES = ("BUILD", "psctl")

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
COMMENT_MARKER = re.compile(r"^\s*(//+|#+|\*+)?\s*")
DOC_REF = re.compile(r"\bdocs/([A-Za-z0-9_.-]+\.md)(?:, \"([^\"\n]*))?")


def walk(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d for d in dirnames if d not in SKIP_DIRS and not d.startswith("bazel-")
        )
        for name in sorted(filenames):
            yield os.path.join(dirpath, name)


def slug(text):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link: its text
    text = text.lower()
    kept = "".join(ch for ch in text if ch.isalnum() or ch in "-_ ")
    return kept.replace(" ", "-")


def without_code(lines):
    """The lines with fenced blocks blanked (line numbers kept)."""
    out = []
    fenced = False
    for line in lines:
        if FENCE.match(line):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return out


@functools.lru_cache(maxsize=None)
def headings(path):
    """(anchors, heading texts) of a Markdown file."""
    with open(path, encoding="utf-8") as f:
        lines = without_code(f.read().split("\n"))
    anchors, texts, seen = set(), [], {}
    for line in lines:
        m = HEADING.match(line)
        if not m:
            continue
        text = m.group(2)
        texts.append(text.replace("`", ""))
        base = slug(text)
        n = seen.get(base, 0)
        seen[base] = n + 1
        anchors.add(base if n == 0 else f"{base}-{n}")
    return anchors, texts


def check_markdown(root, path, errors):
    with open(path, encoding="utf-8") as f:
        text = "\n".join(without_code(f.read().split("\n")))
    # Inline code spans stay in place as blanks of the same length.
    text = INLINE_CODE.sub(lambda m: " " * len(m.group(0)), text)
    for m in LINK.finditer(text):
        target = m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto: ...
            continue
        line = text.count("\n", 0, m.start()) + 1
        where = f"{os.path.relpath(path, root)}:{line}"
        file_part, _, anchor = target.partition("#")
        dest = (
            os.path.normpath(os.path.join(os.path.dirname(path), file_part))
            if file_part
            else path
        )
        if not os.path.exists(dest):
            errors.append(f"{where}: link to {target}: no such file")
            continue
        if anchor and dest.endswith(".md"):
            anchors, _ = headings(dest)
            if anchor not in anchors:
                errors.append(
                    f"{where}: link to {target}: no heading with anchor "
                    f"#{anchor} in {os.path.relpath(dest, root)}"
                )


def check_source(root, path, errors):
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except UnicodeDecodeError:
        return
    for i, line in enumerate(lines, 1):
        for m in DOC_REF.finditer(line):
            where = f"{os.path.relpath(path, root)}:{i}"
            doc = os.path.join(root, "docs", m.group(1))
            if not os.path.exists(doc):
                errors.append(f"{where}: docs/{m.group(1)}: no such file")
                continue
            quoted = m.group(2)
            if quoted is None:
                continue
            closed = line[m.end() :].startswith('"')
            if not closed and i < len(lines):
                rest = COMMENT_MARKER.sub("", lines[i]).split('"')[0]
                quoted = f"{quoted} {rest}"
            quoted = " ".join(quoted.split())
            if not quoted:
                continue
            _, texts = headings(doc)
            words = quoted.replace("`", "")
            if not any(t.startswith(words) for t in texts):
                errors.append(
                    f'{where}: docs/{m.group(1)}, "{quoted}...": no heading '
                    "there begins so"
                )


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = os.path.abspath(sys.argv[1])
    errors = []
    markdown = sources = 0
    for path in walk(root):
        name = os.path.basename(path)
        if name.endswith(".md"):
            markdown += 1
            check_markdown(root, path, errors)
        elif name.endswith(SOURCE_SUFFIXES) or name in SOURCE_NAMES:
            sources += 1
            check_source(root, path, errors)
    for e in errors:
        print(e)
    if errors:
        print(f"docs_links: {len(errors)} broken reference(s)")
        sys.exit(1)
    print(f"docs_links: {markdown} Markdown files and {sources} sources checked")


if __name__ == "__main__":
    main()
