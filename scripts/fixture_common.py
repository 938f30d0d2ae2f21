"""What the scripts that make this repository's HF fixtures share
(scripts/make-fixture-*.py, each writing one directory of test/Fixtures):
finding make() of the shared fixtures' make_fixture.py, and the README that
says how a fixture was made and what was checked then. Needs torch only
when a README is written (it names the machine and the versions)."""
import datetime
import os
import platform
import shlex
import sys


def command_line():
    """This script's command line, as a user would type it again."""
    return " ".join(shlex.quote(a) for a in [
        "python3", os.path.relpath(sys.argv[0])] + sys.argv[1:])


def import_make(name, make_fixture_dir):
    """make() of make_fixture.py in `make_fixture_dir` (the shared
    fixtures' directory; that file is not part of this repository)."""
    sys.path.insert(0, os.path.abspath(make_fixture_dir))
    try:
        from make_fixture import make
    except ImportError as e:
        raise SystemExit(f"{name}: cannot import make_fixture from "
                         f"{make_fixture_dir}: {e}")
    return make


def machine_description():
    import torch
    parts = [f"host {platform.node()}", platform.platform()]
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    parts.append("CPU " + line.split(":", 1)[1].strip())
                    break
    except OSError:
        pass
    if torch.cuda.is_available():
        parts.append("GPU " + torch.cuda.get_device_name(0))
    return "; ".join(parts)


def write_readme(out, name, title, description, command, script, checks):
    """Writes out/README.md: the title and description, how the fixture was
    made (`command`, by `script`), the machine, the versions, the size, and
    the checks' lines; prints them."""
    import torch
    import transformers
    sizes = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    readme = f"""# {name}: {title}

{description}

Made by `{command}` ({script}, which calls make() of the shared
fixtures' make_fixture.py) on {datetime.date.today().isoformat()}:
- machine: {machine_description()}
- Python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}
- {sizes} bytes in all

Checked when made:
""" + "".join(f"- {line}\n" for line in checks)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(readme)
    print(f"{name}: wrote {out} ({sizes} bytes); checks passed:")
    for line in checks:
        print("  " + line)


def load_model(out, name, configure=None):
    """The fixture's initial weights (out/model.safetensors) in float64, in
    HF's LlamaForCausalLM of out/config.json (eager attention), as make()
    trains them; `configure(cfg)` may change the config first. A tied head
    is tied again. Returns (model, config)."""
    import torch
    from safetensors.torch import load_file
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig.from_pretrained(out, attn_implementation="eager")
    if configure:
        configure(cfg)
    model = LlamaForCausalLM(cfg).to(torch.float64)
    state = load_file(os.path.join(out, "model.safetensors"))
    missing, unexpected = model.load_state_dict(
        {k: v.to(torch.float64) for k, v in state.items()}, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise SystemExit(f"{name}: model.safetensors does not fit: missing "
                         f"{missing}, unexpected {unexpected}")
    model.tie_weights()
    return model, cfg
