"""peft LoRA training and trl's SFTTrainer on accel, through the `accelerate` shim."""

from __future__ import annotations

import hf_tiny
import torch


def test_peft_and_trl_take_their_current_accelerate_paths():
    """Both branch on Accelerate's version at import: with the shim's 1.15.0+accel.1 they
    import the names of recent Accelerate releases, and get accel's objects."""
    import accel.utils
    import peft.utils.other
    import trl.models.utils

    assert trl.models.utils.get_parameters_from_modules is accel.utils.get_parameters_from_modules
    assert peft.utils.other.mlu_available is False  # the `>= 0.29` branch asked accel


def test_peft_lora_trains_only_the_adapter_and_reloads(tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import DataCollatorForLanguageModeling, Trainer

    import accel

    tokenizer = hf_tiny.tokenizer()
    data = hf_tiny.text_dataset().map(lambda batch: tokenizer(batch["text"]), batched=True,
                                      remove_columns=["text"])
    model = get_peft_model(hf_tiny.gpt2(), LoraConfig(
        r=4, lora_alpha=8, target_modules=["c_attn"], fan_in_fan_out=True, task_type="CAUSAL_LM"))
    before = hf_tiny.weights(model)
    trainer = Trainer(model=model, args=hf_tiny.training_args(str(tmp_path / "run")),
                      train_dataset=data,
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))
    trainer.train()
    assert isinstance(trainer.accelerator, accel.Accelerator)
    after = hf_tiny.weights(model)
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert changed and all("lora_" in name for name in changed), sorted(changed)
    assert any("lora_A" in name for name in changed)

    model.eval()
    inputs = torch.tensor([tokenizer("hello world").input_ids])
    expected = model(inputs).logits
    model.save_pretrained(tmp_path / "adapter")
    reloaded = PeftModel.from_pretrained(hf_tiny.gpt2(), tmp_path / "adapter").eval()
    torch.testing.assert_close(reloaded(inputs).logits, expected)
    merged = reloaded.merge_and_unload()
    torch.testing.assert_close(merged(inputs).logits, expected, atol=1e-5, rtol=1e-5)


def test_trl_sft_trainer_trains_on_text(tmp_path):
    from trl import SFTConfig, SFTTrainer

    import accel

    model = hf_tiny.gpt2()
    before = hf_tiny.weights(model)
    args = SFTConfig(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=4,
                     gradient_accumulation_steps=2, learning_rate=1e-2, max_length=64,
                     report_to=[], use_cpu=True, save_strategy="no", logging_steps=1,
                     disable_tqdm=True, seed=0)
    trainer = SFTTrainer(model=model, args=args, train_dataset=hf_tiny.text_dataset(),
                         processing_class=hf_tiny.tokenizer())
    trainer.train()
    assert isinstance(trainer.accelerator, accel.Accelerator)
    assert trainer.state.global_step == 3
    losses = hf_tiny.losses(trainer)
    assert sorted(losses) == [1, 2, 3]
    assert all(torch.isfinite(torch.tensor(v)) for v in losses.values())
    after = hf_tiny.weights(model)
    assert all(not torch.equal(before[name], after[name]) for name in before)
