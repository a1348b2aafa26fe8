#!/usr/bin/python3
"""q4nx-mutate.py SRC DST MUTATION - a copy of container SRC with one edit of its tensor bytes, for the
cases of t/gguf.bats that generated packs do not produce. Offsets come from the tensor table
(man/man5/q4nx.5); the mutated tensors' checksums and the metadata's are recomputed (the container is
consistent, its values are what changed), except for the corrupt-code mutation, whose point is a stale one.

Mutations:
  zeros-4      every zero point of every quantised tensor with zero points set to 4: each group is then
               exactly Q4_1 (m = -4 s is an fp16 whenever s is) but not Q4_0 (codes above 11)
  scale-third  (f16 scales, asymmetric) the first scale of the first quantised tensor set to the fp16
               nearest 1/3, its zero point to 3 and (b8) two of its codes to 15 and 0: the only Q4_1 minimum,
               m = -3 s, then needs more bits than fp16 has
  bos-999999   the model description's 6-digit bos_token_id rewritten as 999999 (same length, so every
               offset stays): an id outside any fixture's vocabulary; bos--99999 the same with -99999
  corrupt-code one byte of the first quantised tensor's codes flipped, its checksum left as it was
  meta-tensors the metadata's q4nx.tensors count rewritten as 9s (the metadata checksum recomputed)
  scale-nan    (f32 scales) the first scale of the first quantised tensor a NaN, the checksums consistent:
               a pack whose weights were broken before they were repacked
  scale-inf    (any scale dtype, rm or b8) the scale of row 5, group 1 (or the last of either) of the first
               quantised tensor with 2 groups a row or more (else the first one) +infinity, the checksums consistent; prints
               "NAME ROW GROUP" (where it wrote, computed here from q4nx(5)'s layouts)
"""
import struct
import sys


from crc32c import crc32c as _crc32c  # t/crc32c.py, beside this script


def crc32c(data):
    return _crc32c(0, data)


def main():
    if len(sys.argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    src, dst, what = sys.argv[1:]
    b = bytearray(open(src, "rb").read())
    mo, ms, to, tc, ac, so, ss = struct.unpack_from("<QQQIIQQ", b, len(b) - 64)
    done = 0
    if what.startswith("bos-") and len(what) == 10:  # bos-999999, bos--99999: six characters in place of six digits
        meta = bytes(b[mo:mo + ms])
        k = meta.find(b'"bos_token_id":')
        j = k + len(b'"bos_token_id":')
        while k >= 0 and meta[j:j + 1] == b" ":
            j += 1
        if k >= 0 and meta[j:j + 6].isdigit() and not meta[j + 6:j + 7].isdigit():
            b[mo + j:mo + j + 6] = what[4:].encode()
            # the metadata checksum (footer + 48) covers [meta_offset, file_size - 64): recomputed
            struct.pack_into("<I", b, len(b) - 64 + 48, crc32c(bytes(b[mo:len(b) - 64])))
            done = 1
    if what == "meta-tensors":  # the metadata's q4nx.tensors (written first) as 9s of the same length
        meta = bytes(b[mo:mo + ms])
        k = meta.find(b'"tensors":')
        j = k + len(b'"tensors":')
        n = 0
        while k >= 0 and meta[j + n:j + n + 1].isdigit():
            n += 1
        if n and meta[j:j + n] != b"9" * n:
            b[mo + j:mo + j + n] = b"9" * n
            struct.pack_into("<I", b, len(b) - 64 + 48, crc32c(bytes(b[mo:len(b) - 64])))
            done = 1
    quant = [i for i in range(tc) if b[to + 128 * i + 16] in (4, 7)]
    wide = [i for i in quant if struct.unpack_from("<I", b, to + 128 * i + 28)[0] >= 2]
    inf_at = (wide or quant or [-1])[0]
    for i in range(tc):
        e = to + 128 * i
        dtype, layout, sdt, zp = b[e + 16], b[e + 17], b[e + 18], b[e + 19]
        off, size, soff, zoff = struct.unpack_from("<QQQQ", b, e + 64)
        if dtype != 4 and not (what == "scale-inf" and i == inf_at):
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
        elif what == "scale-nan" and sdt == 1 and not done:  # f32 scales: the first one NaN
            struct.pack_into("<I", b, off + soff, 0x7FC00000)
            done = 1
        elif what == "scale-inf" and i == inf_at:
            blk, kb = struct.unpack_from("<II", b, e + 24)
            n = struct.unpack_from("<Q", b, e + 32)[0]
            row, grp = min(5, n - 1), min(1, kb - 1)
            if dtype == 7 or layout == 0:  # q8: source order [N][kb]
                idx = row * kb + grp
            elif layout == 2:  # b8: ((rb*kb + g)*16 + r)
                idx = ((row // 16) * kb + grp) * 16 + row % 16
            else:  # rm: tiles of 32 rows x 256 columns, entry t*(256/B)*32 + (c/B)*32 + R
                ntc = (kb * blk + 255) // 256
                col = grp * blk
                t = (row // 32) * ntc + col // 256
                idx = t * (256 // blk) * 32 + ((col % 256) // blk) * 32 + row % 32
            if sdt == 1:
                struct.pack_into("<I", b, off + soff + 4 * idx, 0x7F800000)
            else:  # f16 +inf 0x7C00, bf16 +inf 0x7F80
                struct.pack_into("<H", b, off + soff + 2 * idx, 0x7C00 if sdt == 2 else 0x7F80)
            no, nl = struct.unpack_from("<II", b, e)
            print(b[so + no:so + no + nl].decode(), row, grp)
            done = 1
        elif what == "corrupt-code" and not done:
            b[off + 3] ^= 0x10
            done = 1
            continue
        else:
            continue
        struct.pack_into("<I", b, e + 96, crc32c(bytes(b[off:off + size])))
    if done and what != "corrupt-code":  # the table is inside the metadata checksum's range
        struct.pack_into("<I", b, len(b) - 64 + 48, crc32c(bytes(b[mo:len(b) - 64])))
    if not done:
        sys.stderr.write("q4nx-mutate.py: %s: nothing to mutate in %s\n" % (what, src))
        return 3
    open(dst, "wb").write(b)
    return 0


if __name__ == "__main__":
    sys.exit(main())
