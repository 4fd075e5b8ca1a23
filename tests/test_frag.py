import copy
import json
import math
import subprocess
import sys

import pytest
import torch

from frag_utils import calibration, data, frag, models, pruning
from frag_utils.checkpoint_files import UnreadableCheckpoint
from frag_utils.frag import FragError


@pytest.fixture()
def setup(tiny, tokenizer):
    modules = calibration.select_modules(tiny, "all")
    cfg = calibration.CalibConfig(n=8, max_len=64)
    xf = calibration.activation_norms(tiny, tokenizer, data.load_split("synthetic", "forget10"), modules, cfg)
    xr = calibration.activation_norms(tiny, tokenizer, data.load_split("synthetic", "retain90"), modules, cfg)
    return tiny, frag.state_dict_of(tiny), xf, xr


def _perturbed(w0, seed=0, scale=1e-2, only=("mlp.up_proj", "self_attn.q_proj")):
    gen = torch.Generator().manual_seed(seed)
    return {k: v + scale * torch.randn(v.shape, generator=gen) * any(o in k for o in only) if v.dim() == 2
            else v.clone() for k, v in w0.items()}


def _dense_frag(w0, wu, xf, xr, gamma, eps=1e-6):
    """F, R, D as one long vector each over all scored layers, cosines by torch directly."""
    fs, rs, ds = [], [], []
    for n in sorted(xf):
        a = w0[f"{n}.weight"].double().abs()
        fs.append((a * (xf[n].double() / (xr[n].double() + eps))).flatten())
        rs.append((a * (xr[n].double() / (xf[n].double() + eps))).flatten())
        ds.append((wu[f"{n}.weight"].double() - w0[f"{n}.weight"].double()).pow(2).flatten())
    f, r, d = torch.cat(fs), torch.cat(rs), torch.cat(ds)
    cos = torch.nn.functional.cosine_similarity
    a_f, a_r = float(cos(f, d, dim=0)), float(cos(r, d, dim=0))
    return a_f - gamma * a_r, a_f, a_r


def test_frag_equals_dense_computation(setup):
    _, w0, xf, xr = setup
    wu = _perturbed(w0)
    res = frag.compute_frag(w0, wu, xf, xr, gamma=0.7)
    expected = _dense_frag(w0, wu, xf, xr, 0.7)
    assert (res.frag, res.a_f, res.a_r) == pytest.approx(expected, rel=1e-6)
    assert sum(row["a_f_share"] for row in res.per_layer) == pytest.approx(res.a_f)
    assert sum(t["a_r_share"] for t in res.per_type.values()) == pytest.approx(res.a_r)
    assert res.with_gamma(0) == pytest.approx(res.a_f)


def test_scale_invariance(setup):
    _, w0, xf, xr = setup
    wu = _perturbed(w0)
    base = frag.compute_frag(w0, wu, xf, xr).frag
    for c in (0.1, 3.0):
        scaled = {k: w0[k] + c * (wu[k] - w0[k]) for k in w0}
        assert frag.compute_frag(w0, scaled, xf, xr).frag == pytest.approx(base, abs=1e-6)  # fp32 weights


def test_l2_values(setup):
    _, w0, xf, xr = setup
    wu = _perturbed(w0)
    wu["model.embed_tokens.weight"] = w0["model.embed_tokens.weight"] + 1e-3  # outside the scored modules
    res = frag.compute_frag(w0, wu, xf, xr)
    total = math.sqrt(sum(float((wu[k].double() - w0[k].double()).pow(2).sum()) for k in w0))
    scored = math.sqrt(sum(float((wu[f"{n}.weight"].double() - w0[f"{n}.weight"].double()).pow(2).sum()) for n in xf))
    assert res.l2_all == pytest.approx(total, rel=1e-9) and res.l2_scored == pytest.approx(scored, rel=1e-9)
    assert res.l2_all > res.l2_scored
    assert "lm_head.weight" not in w0  # the tied head is counted once


def test_streaming_from_disk_equals_in_memory(setup, tokenizer, tmp_path):
    model, w0, xf, xr = setup
    edited = copy.deepcopy(model)
    edited.load_state_dict(_perturbed(w0), strict=False)
    models.save_checkpoint(edited, tokenizer, tmp_path / "u")
    on_disk = frag.compute_frag(w0, frag.SafetensorsCheckpoint(tmp_path / "u"), xf, xr)
    in_memory = frag.compute_frag(w0, frag.state_dict_of(edited), xf, xr)
    assert on_disk.summary() == pytest.approx(in_memory.summary())


def test_bad_inputs_give_errors_not_numbers(setup, tokenizer):
    _, w0, xf, xr = setup
    wu = _perturbed(w0)
    with pytest.raises(FragError, match="identical"):
        frag.compute_frag(w0, {k: v.clone() for k, v in w0.items()}, xf, xr)
    missing = {k: v for k, v in wu.items() if "layers.1.mlp.down_proj" not in k}
    with pytest.raises(FragError, match="missing from the unlearned"):
        frag.compute_frag(w0, missing, xf, xr)
    for side in ("unlearned", "original"):
        bad = {k: v.clone() for k, v in (wu if side == "unlearned" else w0).items()}
        bad["model.layers.0.mlp.up_proj.weight"][0, 0] = float("nan")
        args = (w0, bad) if side == "unlearned" else (bad, wu)
        with pytest.raises(FragError, match=f"{side} .*NaN or inf"):
            frag.compute_frag(*args, xf, xr)
    other = frag.state_dict_of(models.build_tiny_model(len(tokenizer) + 8))
    with pytest.raises(FragError, match="different architectures"):
        frag.global_l2(w0, other)
    shapes = dict(wu)
    shapes["model.layers.0.mlp.up_proj.weight"] = torch.zeros(3, 3)
    with pytest.raises(FragError, match="shape"):
        frag.compute_frag(w0, shapes, xf, xr)
    nan_norms = {k: v.clone() for k, v in xf.items()}
    next(iter(nan_norms.values()))[0] = float("nan")
    with pytest.raises(FragError, match="calibration norm .*NaN"):
        frag.compute_frag(w0, wu, nan_norms, xr)
    with pytest.raises(FragError, match="non-empty"):
        frag.compute_frag(w0, wu, {}, {})
    with pytest.raises(UnreadableCheckpoint, match="no .safetensors"):
        frag.SafetensorsCheckpoint(".")


def test_noise_scores_near_zero_while_targeted_prune_does_not(setup):
    model, w0, xf, xr = setup
    mlp = list(calibration.select_modules(model, "mlp"))
    frp_sd, _ = pruning.edited_copy(model, lambda mods: pruning.frp_prune(
        mods, {n: xf[n] for n in mods}, {n: xr[n] for n in mods}, rho=0.1, beta=0.05))
    l2 = frag.global_l2(w0, frp_sd)
    noise_sd, sigma = pruning.edited_copy(model, lambda mods: pruning.add_isotropic_noise(mods, 10 * l2, seed=0))
    noise = frag.compute_frag(w0, noise_sd, xf, xr)
    targeted = frag.compute_frag(w0, frp_sd, xf, xr)
    assert noise.l2_all == pytest.approx(10 * l2, rel=0.05) and sigma > 0
    # on a random tiny model forget and retain activations barely differ, so every FRAG is small;
    # still, the direction-blind update scores near zero and far below the targeted one
    assert abs(noise.frag) < 0.01 and targeted.frag > 5 * abs(noise.frag) > 0
    assert mlp and all(frp_sd[k].eq(0).any() for k in (f"{n}.weight" for n in mlp))


def test_score_cli_on_two_local_checkpoints(setup, tokenizer, tmp_path):
    model, w0, _, _ = setup
    models.save_checkpoint(model, tokenizer, tmp_path / "orig")
    edited = copy.deepcopy(model)
    edited.load_state_dict(_perturbed(w0), strict=False)
    models.save_checkpoint(edited, tokenizer, tmp_path / "unl")
    run = lambda *a: subprocess.run([sys.executable, "-m", "frag_utils", "score", *a], capture_output=True,  # noqa: E731
                                    text=True, timeout=600,
                                    env={**__import__("os").environ, "FRAG_CACHE_DIR": str(tmp_path / "c")})
    out = run("--original", str(tmp_path / "orig"), "--unlearned", str(tmp_path / "unl"), "--n-calib", "8",
              "--max-len", "64", "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert -1 <= res["frag"] <= 1 and res["l2_all"] > 0 and res["calibration"]["n"] == 8
    assert {"calibration_seconds", "comparison_seconds"} <= set(res["timings"])
    out = run("--original", str(tmp_path / "orig"), "--unlearned", str(tmp_path / "orig"), "--n-calib", "4")
    assert out.returncode == 2 and "identical" in out.stderr and "Traceback" not in out.stderr
    out = run("--original", str(tmp_path / "orig"), "--unlearned", str(tmp_path / "nowhere"))
    assert out.returncode == 2 and "does not exist" in out.stderr


def test_lower_precision_checkpoint_is_compared_at_its_own_precision(setup):
    _, w0, xf, xr = setup
    wu = _perturbed(w0, scale=0.05)
    half = {k: v.to(torch.bfloat16) for k, v in wu.items()}
    res = frag.compute_frag(w0, half, xf, xr)
    # untouched tensors (embeddings, norms, unperturbed projections) contribute nothing
    rounded = {k: v.to(torch.bfloat16) for k, v in w0.items()}
    expected = math.sqrt(sum(float((half[k].double() - rounded[k].double()).pow(2).sum()) for k in w0))
    assert res.l2_all == pytest.approx(expected, rel=1e-9)
    assert all(row["sq_diff"] == 0 for row in res.per_layer
               if "up_proj" not in row["module"] and "q_proj" not in row["module"])


def test_score_pair_streams_the_original_when_calibration_is_cached_with_the_same_result(setup, tokenizer, tmp_path,
                                                                                         monkeypatch):
    model, w0, _, _ = setup
    monkeypatch.setenv("FRAG_CACHE_DIR", str(tmp_path / "cache"))
    models.save_checkpoint(model, tokenizer, tmp_path / "orig")
    edited = copy.deepcopy(model)
    edited.load_state_dict(_perturbed(w0), strict=False)
    models.save_checkpoint(edited, tokenizer, tmp_path / "unl")
    cfg = calibration.CalibConfig(n=8, max_len=64)
    first = frag.score_pair(str(tmp_path / "orig"), str(tmp_path / "unl"), calib=cfg)
    assert not first["timings"]["original_streamed"] and not first["timings"]["calibration_forget_cached"]
    calls = []
    monkeypatch.setattr(models, "load_model", lambda *a, **k: calls.append(a))  # a streamed run builds no model
    again = frag.score_pair(str(tmp_path / "orig"), str(tmp_path / "unl"), calib=cfg)
    assert again["timings"]["original_streamed"] and calls == []
    for key in ("frag", "a_f", "a_r", "l2_scored"):
        assert again[key] == pytest.approx(first[key], rel=1e-12), key
    assert again["l2_all"] == pytest.approx(first["l2_all"], rel=1e-12)
    assert [r["module"] for r in again["per_layer"]] == [r["module"] for r in first["per_layer"]]
    # and the dense definition agrees with both
    xf = calibration.activation_norms(model, tokenizer, data.load_split("synthetic", "forget10"),
                                      calibration.select_modules(model, "all"), cfg)
    xr = calibration.activation_norms(model, tokenizer, data.load_split("synthetic", "retain90"),
                                      calibration.select_modules(model, "all"), cfg)
    dense = _dense_frag(w0, frag.state_dict_of(edited), xf, xr, 1.0)
    assert again["frag"] == pytest.approx(dense[0], rel=1e-9)


def test_an_original_built_in_memory_is_compared_in_fp32_when_calibration_runs_in_bf16(setup, tokenizer, tmp_path,
                                                                                       monkeypatch):
    # 'tiny' cannot be streamed from disk; calibrating it in bf16 (a GPU's dtype) must not make D
    # count the bf16 rounding of W0 as an update
    model, w0, _, _ = setup
    monkeypatch.setenv("FRAG_CACHE_DIR", str(tmp_path / "cache"))
    edited = copy.deepcopy(model)
    edited.load_state_dict(_perturbed(w0), strict=False)
    models.save_checkpoint(edited, tokenizer, tmp_path / "unl")
    cfg = calibration.CalibConfig(n=8, max_len=64)
    fp32 = frag.score_pair(models.TINY, str(tmp_path / "unl"), calib=cfg)
    bf16 = frag.score_pair(models.TINY, str(tmp_path / "unl"), calib=cfg, dtype=torch.bfloat16)
    expected = math.sqrt(sum(float((v.double() - w0[k].double()).pow(2).sum()) for k, v in _perturbed(w0).items()))
    assert fp32["l2_all"] == pytest.approx(expected, rel=1e-9)
    assert bf16["l2_all"] == fp32["l2_all"]
    assert all(row["sq_diff"] == 0 for row in bf16["per_layer"]
               if "up_proj" not in row["module"] and "q_proj" not in row["module"])


def test_blocks_of_rows_change_nothing(setup, tokenizer, tmp_path, monkeypatch):
    model, w0, xf, xr = setup
    wu = _perturbed(w0, seed=3)
    whole = frag.compute_frag(w0, wu, xf, xr)
    edited = copy.deepcopy(model)
    edited.load_state_dict(wu, strict=False)
    models.save_checkpoint(model, tokenizer, tmp_path / "orig")
    models.save_checkpoint(edited, tokenizer, tmp_path / "unl")
    monkeypatch.setattr(frag, "BLOCK", 100)  # a few rows per block, from disk and from memory
    from_disk = (frag.SafetensorsCheckpoint(tmp_path / "orig"), frag.SafetensorsCheckpoint(tmp_path / "unl"))
    for a, b in ((w0, wu), from_disk):
        blocked = frag.compute_frag(a, b, xf, xr)
        for key in ("frag", "a_f", "a_r", "l2_all", "l2_scored"):
            assert getattr(blocked, key) == pytest.approx(getattr(whole, key), rel=1e-10), key
    assert frag.SafetensorsCheckpoint(tmp_path / "unl").rows("model.embed_tokens.weight", 5, 9).shape[0] == 4


def test_moved_weights_are_counted_directly(setup):
    """n_moved is the number of scored weights that changed at all: the measure of how much of a
    dense update survives bf16 storage."""
    _, w0, xf, xr = setup
    wu = {k: v.clone() for k, v in w0.items()}
    key = f"{sorted(xf)[0]}.weight"
    wu[key][0, :5] += 1e-3
    wu[key][1, 0] = 0.0 if wu[key][1, 0] != 0 else 1.0
    res = frag.compute_frag(w0, wu, xf, xr)
    n = sum(w0[f"{m}.weight"].numel() for m in xf)
    direct = sum(int((wu[f"{m}.weight"] != w0[f"{m}.weight"]).sum()) for m in xf)
    assert res.n_moved == direct == 6 and res.summary()["moved_fraction"] == pytest.approx(6 / n)


def test_toy_layer_written_out_entry_by_entry():
    """Notebook 04's worked example: F, R, D and the cosines by loops over entries, each norm scaling
    its input column (a non-square layer, so a row-wise broadcast could not pass), against compute_frag."""
    w0 = [[1.0, -2.0, 0.5, 1.0], [-1.0, 1.0, 2.0, -0.5], [2.0, 0.5, -1.0, 1.0]]  # [d_out=3, d_in=4]
    wu = [row[:] for row in w0]
    wu[0][0] = wu[2][0] = 0.0
    wu[1][2] = 1.5
    xf, xr = [2.0, 1.0, 1.0, 0.5], [0.5, 1.0, 2.0, 1.0]  # [d_in]
    eps, gamma = 1e-6, 0.5
    assert frag.EPS == eps  # the value notebook 04 states
    f, r, d = [], [], []
    for i in range(3):
        for j in range(4):
            f.append(abs(w0[i][j]) * xf[j] / (xr[j] + eps))
            r.append(abs(w0[i][j]) * xr[j] / (xf[j] + eps))
            d.append((wu[i][j] - w0[i][j]) ** 2)

    def cos(a, b):
        return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))

    res = frag.compute_frag({"toy.weight": torch.tensor(w0)}, {"toy.weight": torch.tensor(wu)},
                            {"toy": torch.tensor(xf)}, {"toy": torch.tensor(xr)}, gamma)
    assert (res.a_f, res.a_r, res.frag) == pytest.approx((cos(f, d), cos(r, d), cos(f, d) - gamma * cos(r, d)),
                                                         rel=1e-12, abs=1e-12)
    assert res.n_moved == 3 and res.l2_scored == pytest.approx(math.sqrt(1 + 4 + 0.25), rel=1e-12)
