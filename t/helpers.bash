# Common setup for bats files: `load helpers`. Puts the build's programs on PATH, sets $TOP.
TOP=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
OGAKIT_BUILD=${OGAKIT_BUILD:-$TOP/build}
PATH="$OGAKIT_BUILD/bin:$PATH"
export TOP OGAKIT_BUILD PATH
# fixture FAMILY STYLE TIE [GEOM] [ACC]: path of a generated OGA pack (cached)
fixture() { "$TOP/tools/fixture.sh" "$@"; }
