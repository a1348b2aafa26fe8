#!/usr/bin/python3
"""q4nx-mutate.py SRC DST MUTATION - a copy of container SRC with one edit of its tensor bytes, for the
cases of t/gguf.bats that generated packs do not produce. Offsets come from the tensor table
(man/man5/q4nx.5); checksums are left stale (q4nx_open does not read them; q4nx-verify would object).

Mutations:
  zeros-4      every zero point of every quantised tensor with zero points set to 4: each group is then
               exactly Q4_1 (m = -4 s is an fp16 whenever s is) but not Q4_0 (codes above 11)
  scale-third  (f16 scales, asymmetric) the first scale of the first quantised tensor set to the fp16
               nearest 1/3, its zero point to 3 and (b8) two of its codes to 15 and 0: the only Q4_1 minimum,
               m = -3 s, then needs more bits than fp16 has
"""
import struct
import sys


def main():
    if len(sys.argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    src, dst, what = sys.argv[1:]
    b = bytearray(open(src, "rb").read())
    mo, ms, to, tc, ac, so, ss = struct.unpack_from("<QQQIIQQ", b, len(b) - 64)
    done = 0
    for i in range(tc):
        e = to + 128 * i
        dtype, layout, sdt, zp = b[e + 16], b[e + 17], b[e + 18], b[e + 19]
        off, size, soff, zoff = struct.unpack_from("<QQQQ", b, e + 64)
        if dtype != 4:
            continue
        if what == "zeros-4" and zp:
            for j in range(off + zoff, off + size):
                b[j] = 4
            done += 1
        elif what == "scale-third" and zp and sdt == 2 and not done:
            struct.pack_into("<H", b, off + soff, 0x3555)  # fp16 0.33325195...
            b[off + zoff] = 3
            if layout == 2:  # b8: byte 0 holds codes (row 0, k 0) low and (row 0, k 4) high: 15 and 0
                b[off] = 0x0F
            done = 1
    if not done:
        sys.stderr.write("q4nx-mutate.py: %s: nothing to mutate in %s\n" % (what, src))
        return 3
    open(dst, "wb").write(b)
    return 0


if __name__ == "__main__":
    sys.exit(main())
