/* lib/spec's self-test arms (the replay rule, the economics, the recording's refusals) as TAP; the
 * same arms spec-replay --selftest runs. */
#include "spec/spec.h"
#include "tap.h"

static void report(int ok, const char *name, void *ctx)
{
    (void)ctx;
    TAP_OK(ok, "%s", name);
}

int main(void)
{
    spec_selftest(report, NULL);
    return TAP_DONE();
}
