"""The ctypes mirrors in attn/_structs.py have the C compiler's layout: every
struct's size and every field's offset, as printed by layout_probe.c."""
import ctypes
import os
import shutil
import subprocess

import pytest

from attn import _structs as S

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(HERE, os.pardir, os.pardir, "include")


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    """{"attn_tensor": size, "attn_tensor.ndim": offset, ...} from the probe
    ctest built (ATTN_LAYOUT_PROBE), else compiled here with cc."""
    probe = os.environ.get("ATTN_LAYOUT_PROBE")
    if not probe:
        cc = shutil.which("cc")
        if not cc:
            pytest.skip("no ATTN_LAYOUT_PROBE and no C compiler to build it")
        probe = str(tmp_path_factory.mktemp("probe") / "layout_probe")
        subprocess.run([cc, "-std=c11", "-I", INCLUDE, os.path.join(HERE, "layout_probe.c"),
                        "-o", probe], check=True)
    lines = subprocess.run([probe], check=True, capture_output=True, text=True).stdout
    return {name: int(value) for name, value in (line.split() for line in lines.splitlines())}


@pytest.mark.parametrize("struct", S.ALL, ids=lambda s: s.__name__)
def test_struct_matches_c(c_layout, struct):
    name = struct.__name__
    assert ctypes.sizeof(struct) == c_layout[name], f"sizeof({name})"
    fields = [f for f, *_ in struct._fields_]
    probed = sorted(k.split(".", 1)[1] for k in c_layout if k.startswith(name + "."))
    assert sorted(fields) == probed, f"{name}: fields differ from the probe's"
    for field in fields:
        assert getattr(struct, field).offset == c_layout[f"{name}.{field}"], f"{name}.{field}"
