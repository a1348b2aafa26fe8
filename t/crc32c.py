"""CRC32C (Castagnoli: reflected 0x82F63B78, initial and final XOR 0xFFFFFFFF) for the tests' stream and
container editors; chainable: crc32c(crc32c(0, a), b) == crc32c(0, a + b)."""

_T = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _T.append(_c)


def crc32c(crc, data):
    crc ^= 0xFFFFFFFF
    for x in data:
        crc = _T[(crc ^ x) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


assert crc32c(0, b"123456789") == 0xE3069283
