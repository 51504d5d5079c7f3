"""`pip install ./python` into a fresh venv, offline, then import and one
call (the ctest test python_install). Run by /usr/bin/python3:

    python3 check_install.py SOURCE_TREE [PREBUILT_LIBRARY]

The source tree (CMakeLists.txt, src/, include/, python/) is copied first, as
a fresh checkout would be, without build directories or any libattn.so, so
setup.py really builds libattn with CMake (a minute or more); with
PREBUILT_LIBRARY the install copies that library instead (seconds). The venv
sees the system's NumPy (--system-site-packages); nothing is downloaded
(--no-build-isolation --no-index). Checked: the package loads the library
inside itself, not the build tree's."""
import os
import shutil
import subprocess
import sys
import tempfile


def main():
    source = os.path.abspath(sys.argv[1])
    env = dict(os.environ)
    env.pop("ATTN_LIBRARY", None)  # the installed package must find its own copy
    env.pop("PYTHONPATH", None)
    if len(sys.argv) > 2:
        env["ATTN_PREBUILT_LIBRARY"] = os.path.abspath(sys.argv[2])
    work = tempfile.mkdtemp(prefix="attn-install-")
    try:
        venv = os.path.join(work, "venv")
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
        py = os.path.join(venv, "bin", "python")
        # a copy of the tree, so the test leaves no build files in it
        tree = os.path.join(work, "src")
        shutil.copytree(source, tree, ignore=shutil.ignore_patterns(
            ".git", "build", "build-*", "*.egg-info", "__pycache__", "*.so", "*.so.*"))
        built = [f for f in os.listdir(os.path.join(tree, "python", "attn")) if ".so" in f]
        assert not built, f"the copied package already holds {built}"
        subprocess.run([py, "-m", "pip", "install", "--quiet", "--no-build-isolation",
                        "--no-index", os.path.join(tree, "python")], check=True, env=env,
                       cwd=work)
        check = ("import attn, numpy as np; "
                 "assert attn.library_path.startswith(attn.__path__[0]), attn.library_path; "
                 "q = np.ones((1, 1, 2, 4), np.float32); "
                 "out = attn.scaled_dot_product_attention(q, q, q); "
                 "assert out.shape == (1, 1, 2, 4) and (out == 1).all(); print('ok', attn.isa())")
        subprocess.run([py, "-c", check], check=True, env=env, cwd=work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
