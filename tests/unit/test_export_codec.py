"""The exports' deflate (ISA-L's where it has a wheel, else zlib): the same gzip either way, so an
export reads back with the standard library and any gzip tool, and one written by zlib (older
versions, or a machine without the wheel) verifies through the faster inflater."""

from __future__ import annotations

import gzip
import hashlib
import zlib

import pytest

from hermes_admin.profile import exports

TEXT = ("".join(f'{{"role":"tool","content":"line {n}: {"x" * (n % 97)}"}}\n' for n in range(20_000))).encode()


def _member(codec) -> bytes:
    compressor = codec.compressobj(exports.LEVEL, zlib.DEFLATED, 31)
    return b"".join(compressor.compress(TEXT[at:at + 65536]) for at in range(0, len(TEXT), 65536)) + compressor.flush()


@pytest.mark.parametrize("codec", sorted({exports.deflate, zlib}, key=lambda m: m.__name__), ids=lambda m: m.__name__)
def test_a_member_of_either_codec_reads_back_with_gzip_and_verifies(tmp_path, codec):
    data = _member(codec)
    assert gzip.decompress(data) == TEXT
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(b"\x1f\x8b" + b"junk before" + data)  # a member further in the file, as appended ones are
    offset = len(b"\x1f\x8b" + b"junk before")
    assert exports.verify_member(str(path), offset, len(data)) == (hashlib.sha256(TEXT).hexdigest(), len(TEXT))
    assert b"".join(exports._member_text(str(path), offset, len(data))) == TEXT  # the readers' zlib


def test_a_damaged_member_is_an_export_error_whatever_the_codec(tmp_path):
    data = bytearray(_member(exports.deflate))
    data[len(data) // 2] ^= 0xFF
    path = tmp_path / "x.jsonl.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(exports.ExportError):
        exports.verify_member(str(path), 0, len(data))
