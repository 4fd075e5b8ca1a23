import pytest
import torch

from frag_utils import models
from frag_utils.models import ModelLoadError

from conftest import same_weights


def test_tiny_is_seeded(tokenizer):
    a = models.build_tiny_model(len(tokenizer), seed=3)
    b = models.build_tiny_model(len(tokenizer), seed=3)
    c = models.build_tiny_model(len(tokenizer), seed=4)
    assert same_weights(a, b) and not same_weights(a, c)


def test_checkpoint_round_trip(tiny, tokenizer, tmp_path):
    folder = models.save_checkpoint(tiny, tokenizer, tmp_path / "ckpt", {"note": "x"})
    assert models.is_checkpoint(folder) and list(folder.glob("*.safetensors"))
    assert models.load_record(folder) == {"note": "x"}
    loaded, tok = models.load_model(str(folder))
    assert same_weights(tiny, loaded)
    assert tok("hello")["input_ids"] == tokenizer("hello")["input_ids"]
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_bad_model_names(tmp_path, monkeypatch):
    with pytest.raises(ModelLoadError, match="does not exist"):
        models.load_model("./no/such/checkpoint")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match="no config.json"):
        models.load_model(str(tmp_path / "empty"))

    import transformers

    def offline(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", offline)
    with pytest.raises(ModelLoadError, match="hub .*smollm2-135m, tiny"):
        models.load_model("meta-llama/Llama-3.2-1B-Instruct")


def test_embedded_smollm2_is_a_real_llama_that_answers():
    model, tokenizer = models.load_model(models.SMOLLM2)
    cfg = model.config
    assert cfg.model_type == "llama" and cfg.num_hidden_layers == 30 and cfg.tie_word_embeddings
    names = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"} <= names
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert models.load_record(models.paths.model_cache_dir(models.SMOLLM2))["dequantized"] == "fp32"
    from frag_utils.metrics import generate_answers

    assert "Paris" in generate_answers(model, tokenizer, ["What is the capital of France?"], 16)[0]
    assert models.smollm2_gguf_path().suffix == ".gguf"


def test_a_checkpoint_is_not_scored_behind_another_prompt_than_it_was_made_with(tmp_path):
    made = tmp_path / "made"
    made.mkdir()
    models.write_record(made, {"cache": {"settings": {"prompt_template": "openunlearning"}}})
    with pytest.raises(ValueError, match="with prompt_template 'openunlearning'.*set prompt_template: openunlearning"):
        models.check_template("model", made)
    models.check_template("openunlearning", made)
    trained = tmp_path / "trained"  # notebook 02 writes the template only when it is not the default
    trained.mkdir()
    models.write_record(trained, {"cache": {"settings": {"split": "full"}}})
    with pytest.raises(ValueError, match="made with prompt_template 'model'"):
        models.check_template("openunlearning", trained)
    models.check_template("openunlearning", models.SMOLLM2, tmp_path / "no_record")  # nothing says: passes
