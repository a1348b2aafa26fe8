# Common setup for bats files: `load helpers`. Puts the build's programs on PATH, sets $TOP.
TOP=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
OGAKIT_BUILD=${OGAKIT_BUILD:-$TOP/build}
PATH="$OGAKIT_BUILD/bin:$PATH"
export TOP OGAKIT_BUILD PATH
# fixture FAMILY STYLE TIE [GEOM] [ACC]: path of a generated OGA pack (cached)
fixture() { "$TOP/tools/fixture.sh" "$@"; }
# skip_under_san WHY: in the ASan+UBSan run (make check SAN=1), skip a test whose time goes to an
# outside oracle (Python reading a file our program wrote, llama.cpp computing the same model) and that
# runs none of our C that other tests do not run; the plain build runs it.
skip_under_san() { [ "${OGAKIT_SAN:-0}" != 1 ] || skip "SAN=1: $1 (the plain build runs it)"; }
