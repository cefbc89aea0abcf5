"""What `pip install .` gives: the typed package, the extension's stubs, and the command line."""

import inspect
import os
import shutil
import subprocess
import sys

import kdagraph


def test_the_extension_has_stubs_that_name_its_api():
    here = os.path.dirname(kdagraph.__file__)
    stub = os.path.join(here, "_kdagraph.pyi")
    assert os.path.isfile(stub), "the wheel installs _kdagraph.pyi"
    text = open(stub).read()
    for name in ("class Verifier", "class GraphRunner", "class RoundSpec", "class SlotStorage",
                 "def build_indices", "def materialize", "class Mode", "def conv_layer", "def conv_state_row_elems",
                 "conv_width: int = 0", "conv_state: object | None = None", "conv_window: object | None = None",
                 "def read_conv_window"):
        assert name in text, f"{name} is missing from the stubs"
    for name in dir(kdagraph._kdagraph):  # every public name of the extension is stubbed
        if not name.startswith("_") and name not in ("built_with_cuda",):
            assert f"def {name}(" in text or f"class {name}" in text or f"{name}:" in text, f"{name} has no stub"
    assert os.path.isfile(os.path.join(here, "py.typed"))


def test_the_drop_ins_are_typed_with_the_engines_signatures():
    sig = inspect.signature(kdagraph.recurrent_kda)
    assert list(sig.parameters)[:21] == [
        "q", "k", "v", "g", "beta", "A_log", "dt_bias", "scale", "initial_state", "output_final_state",
        "use_qk_l2norm_in_kernel", "use_gate_in_kernel", "lower_bound", "cu_seqlens", "ssm_state_indices",
        "num_spec_tokens", "num_accepted_tokens", "output", "initial_state_source", "initial_state_indices",
        "beta_is_logit"]
    assert sig.parameters["use_qk_l2norm_in_kernel"].default is True
    sig = inspect.signature(kdagraph.build_fused_accept_indices)
    assert all(p.kind == p.KEYWORD_ONLY for p in sig.parameters.values())
    assert list(sig.parameters)[:4] == ["slots", "scratch_steps", "draft_token_num", "accept_lens_pool"]
    sig = inspect.signature(kdagraph.short_conv)  # docs/python.md
    assert list(sig.parameters)[:4] == ["x", "conv_state", "weight", "bias"]
    assert sig.parameters["bias"].default is None and sig.parameters["activation"].default == "silu"
    assert all(sig.parameters[p].kind == inspect.Parameter.KEYWORD_ONLY
               for p in ("state_indices", "num_accepted_tokens", "activation", "output", "stream"))


def test_the_modes_have_the_command_lines_names():
    for name, mode in (("two-phase", kdagraph.Mode.two_phase), ("fused-accept", kdagraph.Mode.fused_accept),
                       ("replay", kdagraph.Mode.replay)):
        by_name = kdagraph.Verifier(layers=1, heads=1, value_heads=1, head_k=4, head_v=4, slots=2, scratch_steps=2,
                                    max_rows=1, tokens=2, mode=name)
        by_enum = kdagraph.Verifier(layers=1, heads=1, value_heads=1, head_k=4, head_v=4, slots=2, scratch_steps=2,
                                    max_rows=1, tokens=2, mode=mode)
        assert by_name.mode == by_enum.mode == mode


def test_the_command_line_is_installed_beside_python():
    exe = os.path.join(os.path.dirname(sys.executable), "kdagraph")
    exe = exe if os.path.exists(exe) else shutil.which("kdagraph")
    assert exe, "pip install . puts the kdagraph command line on the environment's PATH"
    run = subprocess.run([exe, "run", "--backend", "cpu", "--rounds", "3"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "tokens per second" in run.stdout
