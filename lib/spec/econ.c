/* Economics of a speculative round in target decode steps (the formulas are in spec.h). */
#include <math.h>

#include "spec.h"

int spec_economics(double tokens_per_round, double step_ms, double pass_ms, double draft_ms_per_round,
                   spec_econ *o, ogk_error *e)
{
    if (!(step_ms > 0) || !isfinite(step_ms))
        return ogk_fail(e, "a decode step of %g ms: want a positive time", step_ms);
    if (!(pass_ms >= step_ms) || !isfinite(pass_ms))
        return ogk_fail(e, "a verify pass of %g ms is cheaper than a decode step (%g ms): a pass of k+1 rows costs at "
                           "least one step",
                        pass_ms, step_ms);
    if (!(draft_ms_per_round > 0) || !isfinite(draft_ms_per_round))
        return ogk_fail(e, "a drafter cost of %g ms per round: want a positive time (no drafter is free)",
                        draft_ms_per_round);
    if (!(tokens_per_round >= 1) || !isfinite(tokens_per_round))
        return ogk_fail(e, "%g tokens per round: a round commits at least one token", tokens_per_round);
    o->verify_steps = pass_ms / step_ms;
    o->draft_steps = draft_ms_per_round / step_ms;
    o->break_even_one = o->verify_steps + o->draft_steps;
    o->break_even_two = o->verify_steps + 1 + o->draft_steps;
    if (!isfinite(o->break_even_two)) /* finite costs whose ratio is not: no number to report */
        return ogk_fail(e, "a verify pass of %g ms and a drafter's %g ms per round are beyond measure in decode steps of "
                           "%g ms", pass_ms, draft_ms_per_round, step_ms);
    o->speedup_one = tokens_per_round / o->break_even_one;
    o->speedup_two = tokens_per_round / o->break_even_two;
    return 0;
}
