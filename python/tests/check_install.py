"""`pip install ./python` into a fresh venv, offline, then import and one
call (the ctest test python_install). Run by /usr/bin/python3:

    python3 check_install.py PACKAGE_DIR [PREBUILT_LIBRARY]

With PREBUILT_LIBRARY (what make test passes: the libattn just built) the
install copies it instead of running CMake again, which keeps the test to
seconds; without it, setup.py builds libattn from the source tree (minutes).
The venv sees the system's NumPy (--system-site-packages); nothing is
downloaded (--no-build-isolation --no-index)."""
import os
import shutil
import subprocess
import sys
import tempfile


def main():
    package = os.path.abspath(sys.argv[1])
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
        # a copy of the package, so the test leaves no build files in the tree
        src = os.path.join(work, "python")
        shutil.copytree(package, src, ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                                      "__pycache__", "*.so*"))
        subprocess.run([py, "-m", "pip", "install", "--quiet", "--no-build-isolation",
                        "--no-index", src], check=True, env=env, cwd=work)
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
