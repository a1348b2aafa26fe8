/* Force-included (-include) into llama.cpp's native build by tools/llama-cpp.sh on CPUs with AMX.
 * GCC 12's amxtileintrin.h declares _tile_loadconfig's memory operand as 8 bytes, although ldtilecfg
 * reads a 64-byte tile configuration; the optimiser may then drop the stores that fill it and the
 * first tile load faults (SIGILL). This replaces the intrinsic with an ldtilecfg whose operand
 * covers all 64 bytes. Written for ogakit; harmless where AMX is not enabled. */
#ifndef OGAKIT_LLAMA_AMX_FIX_H
#define OGAKIT_LLAMA_AMX_FIX_H
#if defined(__AMX_TILE__) && defined(__x86_64__)
#include <immintrin.h>
typedef struct { unsigned char b[64]; } ogakit_tilecfg_bytes;
#undef _tile_loadconfig
#define _tile_loadconfig(cfg) \
    __asm__ volatile("ldtilecfg %0" : : "m"(*(const ogakit_tilecfg_bytes *)(cfg)))
#endif
#endif
