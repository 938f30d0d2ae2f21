# lit configuration of the mlt suite.
import os
import shutil
import subprocess
import sys
import lit.formats

config.name = "mlt"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".json", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.mlt_binary_dir, "test")

config.environment["PATH"] = os.pathsep.join(
    [config.mlt_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")])
config.substitutions.append(("%mlt_src", config.mlt_source_dir))
config.substitutions.append(("%models", os.path.join(config.mlt_source_dir, "models", "llama")))
config.substitutions.append(("%shared", config.shared_dir))
config.substitutions.append(("%python", sys.executable))
# (the Python with sentencepiece and tokenizers: tests that train tokenizers)
config.substitutions.append(("%mlt_python", config.mlt_python))
config.substitutions.append(("%fixture_tools", os.path.join(config.test_source_root, "Training", "fixture_tools.py")))
config.excludes.append("fixture_tools.py")
# test/Fixtures holds HF reference fixtures made for this repository (their
# config.json and train.json are data, not tests); a test that replays one
# requires the feature "fixture-<name>", present once its files are there.
config.excludes.append("Fixtures")
config.substitutions.append(("%fixtures", os.path.join(config.test_source_root, "Fixtures")))
for name in ("llama-ref-d", "llama-ref-e"):
    if os.path.isfile(os.path.join(config.test_source_root, "Fixtures", name, "train.json")):
        config.available_features.add("fixture-" + name)
# torch and transformers in %mlt_python: the tests that load mlt's HF
# exports with transformers itself. Not in scripts/requirements.txt (torch
# is gigabytes): they run where the Python has them, and are reported
# unsupported elsewhere. (Looked up, not imported: an import takes seconds.)
if subprocess.run([config.mlt_python, "-c",
                   "import importlib.util as u, sys; "
                   "sys.exit(not (u.find_spec('torch') and "
                   "u.find_spec('transformers')))"],
                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
    config.available_features.add("transformers")
# mlt-run built with the CUDA backend (--device cuda compiles for its GPU
# architecture); no GPU is needed.
if getattr(config, "mlt_enable_cuda", "").upper() in ("ON", "1", "TRUE", "YES"):
    config.available_features.add("cuda-backend")
if os.path.isdir(os.path.join(config.shared_dir, "fixtures")):
    config.available_features.add("shared-fixtures")
# lit runs a test per core at once, so each process's OpenBLAS keeps one
# thread (mlt-run shares the cores among its own ranks, but cannot see the
# other tests): OpenBLAS's workers spin while they wait, and two runs whose
# pools oversubscribe the cores train tens of times slower, which turned
# the checkpoint tests' timed kills into misses. A count given in the
# environment is passed on.
config.environment["OPENBLAS_NUM_THREADS"] = os.environ.get(
    "OPENBLAS_NUM_THREADS", "1")
# mpirun (Open MPI) starts runs of one process per GPU; the error paths of
# such runs are tested without a GPU. Open MPI refuses root unless told.
if shutil.which("mpirun"):
    config.available_features.add("mpirun")
    for name in ("HOME", "TMPDIR"):
        if name in os.environ:
            config.environment[name] = os.environ[name]
    config.environment["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    config.environment["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    config.environment["OMPI_MCA_btl_vader_single_copy_mechanism"] = "none"
# A sanitized build (MLT_SANITIZE): its programs carry their sanitizers'
# options (lib/Support/SanitizerOptions.cpp); tests that cannot run under
# the sanitizers' slowdown or shadow memory say "UNSUPPORTED: sanitizer".
if getattr(config, "mlt_sanitize", ""):
    config.available_features.add("sanitizer")
