"""engram.torch's lazy import: `import engram` never imports torch, and
`import engram.torch` without torch says what to install. Run in fresh
interpreters, with or without torch installed."""

import subprocess
import sys


def run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def test_importing_engram_does_not_import_torch():
    r = run("import sys, engram; engram.Engine; print('torch' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_engram_torch_without_torch_says_to_install_it():
    # A None entry in sys.modules makes `import torch` raise ImportError,
    # as it does where torch is not installed.
    r = run("import sys\n"
            "sys.modules['torch'] = None\n"
            "try:\n"
            "    import engram.torch\n"
            "except ImportError as e:\n"
            "    print('ImportError:', e)\n")
    assert r.returncode == 0, r.stderr
    assert "ImportError: engram.torch needs PyTorch" in r.stdout
    assert "pip install torch" in r.stdout
