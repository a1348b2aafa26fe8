/* lib/verify — q4nx-verify's oracle: the checks of a container against itself, the OGA pack it came
 * from, and another container of the same pack (man/man1/q4nx-verify.1). Owns the independent side of
 * those comparisons: a MatMulNBits / GatherBlockQuantized decoder written from ContribOperators.md's
 * formula (lib/pack only locates the bytes), a second reading of the ONNX graph for the tied-embedding
 * check, comparison statistics, and the controls (nibbles swapped, zero points dropped) that must fail
 * or the comparison is vacuous. The container side goes through lib/q4nx's layout code. Must stay
 * independent of lib/q4nx's and lib/kern's dequantisation (it checks them): never call them for the
 * reference side. Returns JSON reports and collects failures; never prints or exits.
 *
 * Not reentrant: one verification at a time, between verify_begin and verify_end. */
#ifndef OGK_VERIFY_H
#define OGK_VERIFY_H

#include <jansson.h>
#include <stdint.h>

#include "pack/pack.h"
#include "q4nx/q4nx.h"
#include "util/util.h"

void verify_begin(void);
/* The failures found since verify_begin, one line each ("PATH: tensor NAME (role R): checksum
 * mismatch ..."), in the order found. Owned by the module until verify_end. */
const json_t *verify_failures(void);
void verify_end(void);

/* Structure, versions, padding and every checksum of a container opened with Q4NX_OPEN_NOCRC;
 * *bytes_checked grows by the bytes checksummed. The "container" object of the report. */
json_t *verify_container(const char *path, q4nx_file *f, uint64_t *bytes_checked);
/* Every tensor against the pack it came from (sample rows per tensor, 0: all), statistics and
 * controls, the tied check; fills summary. NULL with e filled when the pack cannot be used at all, and
 * *code the caller's exit: 3 (missing, refused) or 4 (a file not mapped for want of memory). */
json_t *verify_pack(const char *dir, q4nx_file *f, long sample, json_t *summary, ogk_error *e, int *code);
/* Container a against container b (another layout of the same pack): bit-identical dequantisation. */
json_t *verify_against(q4nx_file *a, q4nx_file *b, const char *bpath, json_t *summary);

#endif
