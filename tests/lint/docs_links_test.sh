#!/bin/bash
# Every relative link between the Markdown files and every docs/<name>.md
# a source names (with its quoted heading) resolves (docs_links.py).
#
# The source tree is found from the runfile of psctl (as e2e_test does);
# the test is tagged "external" so that Bazel never answers it from a cache
# while the files it reads, which it does not declare, have changed.
set -uo pipefail

src="$(dirname "$(readlink -f "$TEST_SRCDIR/pstrain/psctl")")"
check="$TEST_SRCDIR/pstrain/tests/lint/docs_links.py"
py=/usr/bin/python3
[[ -x "$py" ]] || py=python3

fail() { echo "FAIL: $*"; exit 1; }

# A planted tree: the anchors GitHub makes (punctuation dropped, repeats
# numbered) resolve, and each kind of broken reference is reported with
# its file and line.
# (Written as $d/..., so that this file names no document that is not
# there.)
d=docs
plant="$TEST_TMPDIR/plant"
mkdir -p "$plant/$d" "$plant/server"
cat > "$plant/$d/topic.md" <<'MD'
# Topic

## What `gRPC`'s settings move (2026-12-03, ÷ 2)

## Again

## Again

```sh
# not a heading
```
MD
{
  echo "See [the settings]($d/topic.md#what-grpcs-settings-move-2026-12-03--2),"
  echo "[the second]($d/topic.md#again-1), [a folder]($d/) and"
  echo '[the web](https://example.org/x#y). `[not a link](nowhere.md)`'
} > "$plant/README.md"
{
  echo "// $d/topic.md, \"What gRPC's settings move\""
  echo "# ($d/topic.md, \"What gRPC's"
  echo "# settings move\")"
} > "$plant/server/a.cc"
out="$("$py" "$check" "$plant")" || fail "a sound tree is refused: $out"

echo "A [heading wrongly named](#not-here) and [a code line]($d/topic.md#not-a-heading)." >> "$plant/README.md"
echo "Read [it]($d/gone.md)." >> "$plant/README.md"
echo "// $d/topic.md, \"Settings\"" > "$plant/server/b.cc"
echo "// see $d/missing.md" > "$plant/server/c.cc"
printf '%s\n' "  // ($d/topic.md, \"What" "  // nothing\")." > "$plant/server/d.cc"
if out="$("$py" "$check" "$plant")"; then
  fail "broken references pass: $out"
fi
for want in "README.md:4: link to #not-here" \
            "README.md:4: link to $d/topic.md#not-a-heading" \
            "README.md:5: link to $d/gone.md: no such file" \
            "server/b.cc:1: $d/topic.md, \"Settings...\": no heading" \
            "server/c.cc:1: $d/missing.md: no such file" \
            "server/d.cc:1: $d/topic.md, \"What nothing...\": no heading" \
            "6 broken reference(s)"; do
  grep -qF -- "$want" <<<"$out" || fail "not reported: '$want' in: $out"
done

# The tree is the real one, not an empty folder.
for f in README.md docs/performance.md server/ps_service.cc; do
  [[ -f "$src/$f" ]] || fail "no $f under $src"
done
if ! out="$("$py" "$check" "$src")"; then
  echo "$out"
  fail "broken documentation references under $src (above)"
fi
echo "PASS: $out"
