"""HF Trainer on cuda:0 with oomdoctor's callback; `oom` asks for a 400 GiB CUDA tensor at step 5."""
import sys

import torch
import transformers
from oomdoctor.integrations.hf import OomDoctorTrainerCallback

out, how = sys.argv[1], sys.argv[2]
cfg = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=1000, n_positions=128,
                        bos_token_id=0, eos_token_id=0)
model = transformers.GPT2LMHeadModel(cfg)


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 240

    def __getitem__(self, i):
        ids = torch.randint(0, 1000, (128,))
        return {"input_ids": ids, "labels": ids}


class Boom(transformers.TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if how == "oom" and state.global_step == 5:
            torch.empty(400 << 30, dtype=torch.uint8, device="cuda")


args = transformers.TrainingArguments(output_dir=out + "-trainer", per_device_train_batch_size=8, max_steps=30,
                                      report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True)
transformers.Trainer(model=model, args=args, train_dataset=Data(),
                     callbacks=[OomDoctorTrainerCallback(out, every_ms=100), Boom()]).train()
