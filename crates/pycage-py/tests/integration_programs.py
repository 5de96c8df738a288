"""Programs the integration tests run in children."""


def png_program(width, height):
    """A program that shows a ``width`` x ``height`` PNG with display()."""
    return (
        "import struct, zlib\n"
        "class Img:\n"
        "    def _repr_png_(self):\n"
        f"        raw = b''.join(b'\\x00' + b'\\xff\\x00\\x00' * {width} for _ in range({height}))\n"
        "        def chunk(kind, data):\n"
        "            body = kind + data\n"
        "            return struct.pack('>I', len(data)) + body + struct.pack('>I', zlib.crc32(body))\n"
        f"        head = struct.pack('>IIBBBBB', {width}, {height}, 8, 2, 0, 0, 0)\n"
        "        return b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', head) + chunk(b'IDAT', zlib.compress(raw))"
        " + chunk(b'IEND', b'')\n"
        "display(Img())\n"
    )
