"""Keep only some kernels in a copy of the tree (tools/variant-ab/run,
tools/variant-ab/test-subset): rewrites that copy's tools/gen_sm90_kernels.py
so its KERNELS list holds the instantiations whose name matches REGEX
(serving kernels only with SERVING=1), then regenerates
src/sm90/instantiations there. Run in the copy's root:

    python3 tools/variant-ab/filter_kernels.py REGEX [SERVING]
"""
import pathlib
import subprocess
import sys


def main():
    regex, serving = sys.argv[1], len(sys.argv) > 2 and sys.argv[2] == "1"
    p = pathlib.Path("tools/gen_sm90_kernels.py")
    s = p.read_text().replace(
        "\ndef registry():",
        "\nimport re as _re\nKERNELS[:] = [k for k in KERNELS if (%r or not k[5]) and _re.search(%r, name(k))]\n\n"
        "def registry():" % (serving, regex), 1)
    p.write_text(s)
    for f in pathlib.Path("src/sm90/instantiations").glob("*.cu"):
        f.unlink()
    subprocess.check_call([sys.executable, "tools/gen_sm90_kernels.py"])


if __name__ == "__main__":
    main()
