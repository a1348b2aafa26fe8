#!/usr/bin/env bash
# fixture.sh - print the absolute path of a generated OGA fixture pack, generating it on demand.
#
#   tools/fixture.sh FAMILY STYLE TIE [GEOM] [ACC] [IODTYPE]
#       FAMILY qwen2|llama|qwen3|phi3|gemma|gemma2|olmo|chatglm, STYLE cpu|amd, TIE tied|untied, GEOM tiny|hd64|hd96|hd128|qwen05b|qwen15b (tiny),
#       ACC 0|4 (0), IODTYPE fp32|fp16 (default fp32 for cpu, fp16 for amd, as real packs are).
#       -> .cache/fixtures/FAMILY-STYLE-TIE-GEOM-accACC[-IODTYPE when not the style's default]/
#   tools/fixture.sh bad NAME     a malformed pack (.cache/fixtures/bad-NAME/)
#   tools/fixture.sh --list-bad   the NAMEs, one per line
#
# Packs are cached and stamped with the sha256 of the generator scripts and each file's size
# and mtime; a changed generator, or a pack damaged in place, is regenerated. Generation holds
# a per-pack flock, so parallel test runs do not race, and writes to a temporary directory
# renamed into place, so a pack is either whole or absent.
# OGAKIT_FIXTURES=DIR puts the cache elsewhere (tests of this script).
# Exit status: 0 ok, 2 usage, 4 generation failed.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(dirname "$here")
root=${OGAKIT_FIXTURES:-$top/.cache/fixtures}   # override for isolated tests
py=/usr/bin/python3

die() { echo "fixture.sh: $1" >&2; exit "${2:-2}"; }
usage() { sed -n '2,17s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

[ $# -ge 1 ] || { usage >&2; exit 2; }
case "$1" in
  -h|--help) usage; exit 0 ;;
  --list-bad) exec "$py" "$here/mkbad.py" --list ;;
esac

if [ "$1" = bad ]; then
  [ $# -eq 2 ] || die "usage: fixture.sh bad NAME"
  names=$("$py" "$here/mkbad.py" --list) || die "mkbad.py --list failed" 4
  grep -qx -- "$2" <<<"$names" || die "bad: unknown NAME '$2' (see --list-bad)"
  name="bad-$2"
  gen=("$py" "$here/mkpack.py" --bad "$2")
  stamp=$(cat "$here/mkpack.py" "$here/mkbad.py" | sha256sum | cut -c1-64)
else
  [ $# -ge 3 ] && [ $# -le 6 ] || { usage >&2; exit 2; }
  fam=$1 style=$2 tie=$3 geom=${4:-tiny} acc=${5:-0}
  case "$fam" in qwen2|llama|qwen3|phi3|gemma|gemma2|olmo|chatglm) ;; *) die "FAMILY: qwen2|llama|qwen3|phi3|gemma|gemma2|olmo|chatglm, not '$fam'" ;; esac
  case "$style" in cpu) def=fp32 ;; amd) def=fp16 ;; *) die "STYLE: cpu|amd, not '$style'" ;; esac
  case "$tie" in tied|untied) ;; *) die "TIE: tied|untied, not '$tie'" ;; esac
  case "$geom" in tiny|hd64|hd96|hd128|qwen05b|qwen15b) ;; *) die "GEOM: tiny|hd64|hd96|hd128|qwen05b|qwen15b, not '$geom'" ;; esac
  case "$acc" in 0|4) ;; *) die "ACC: 0|4, not '$acc'" ;; esac
  io=${6:-$def}
  case "$io" in fp32|fp16) ;; *) die "IODTYPE: fp32|fp16, not '$io'" ;; esac
  name="$fam-$style-$tie-$geom-acc$acc"
  [ "$io" = "$def" ] || name="$name-$io"
  gen=("$py" "$here/mkpack.py" --family "$fam" --style "$style" --tie "$tie" --geom "$geom"
       --accuracy-level "$acc" --io-dtype "$io")
  stamp=$(sha256sum "$here/mkpack.py" | cut -c1-64)
fi

dir=$root/$name
# The stamp is the generator's hash plus every file's size and mtime, so a pack that a test
# damaged in place (instead of copying it first) is noticed and regenerated too.
listing() { (cd "$1" && find . -type f ! -name .stamp -printf '%p %s %T@\n' | LC_ALL=C sort); }
fresh() { [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$(printf '%s\n%s' "$stamp" "$(listing "$dir")")" ]; }
# the half-made pack goes on every way out (SIGINT/SIGTERM during generation left .tmp-NAME.* behind)
tmp=
trap '[ -z "$tmp" ] || rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
if ! fresh; then
  # (an unusable cache root was bash's own message and status 1)
  { mkdir -p "$root" && exec 9>"$root/.$name.lock"; } 2>/dev/null ||
    die "$root: cannot keep fixtures there (set OGAKIT_FIXTURES to a writable directory)" 4
  flock 9
  if ! fresh; then
    tmp=$(mktemp -d "$root/.tmp-$name.XXXXXX")
    chmod 755 "$tmp"
    if ! log=$("${gen[@]}" --out "$tmp" 2>&1); then
      rm -rf "$tmp"
      die "generating $name failed: $log" 4
    fi
    printf '%s\n%s\n' "$stamp" "$(listing "$tmp")" > "$tmp/.stamp"
    # two renames: readers see the old pack or the new one, never a half-deleted directory
    old=
    if [ -e "$dir" ]; then old=$(mktemp -u "$root/.old-$name.XXXXXX"); mv "$dir" "$old"; fi
    mv "$tmp" "$dir"
    tmp=
    [ -z "$old" ] || rm -rf "$old"
  fi
  exec 9>&-
fi
echo "$dir"
