"""Which config.json files HF's config classes load (fuzz_import.py --hf-python).

Prints "PATH<TAB>ok" or "PATH<TAB>refused<TAB>why" for each file, read as
from_pretrained reads it: Python's json, then the class of its model_type
(kimi_k2 is DeepSeek-V3's), else of its architectures entry. --drop FIELD leaves a field out first, as
moe-import --ignore does.
"""
import argparse
import json
import warnings

from transformers import DeepseekV3Config, MixtralConfig, Qwen3MoeConfig
from transformers.utils import logging

CLASSES = {"mixtral": MixtralConfig, "qwen3_moe": Qwen3MoeConfig,
           "deepseek_v3": DeepseekV3Config, "kimi_k2": DeepseekV3Config}
# from_pretrained of the model class needs no model_type.
BY_ARCHITECTURE = {"MixtralForCausalLM": MixtralConfig,
                   "Qwen3MoeForCausalLM": Qwen3MoeConfig,
                   "DeepseekV3ForCausalLM": DeepseekV3Config}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--drop", action="append", default=[])
    parser.add_argument("files", nargs="*")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.set_verbosity_error()
    for path in args.files:
        try:
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
            for field in args.drop:
                config.pop(field, None)
            if "model_type" in config:
                cls = CLASSES[config["model_type"]]
            else:
                cls = BY_ARCHITECTURE[config["architectures"][0]]
            cls.from_dict(config)
            print(f"{path}\tok")
        except Exception as error:  # what HF raises is the answer
            why = f"{type(error).__name__}: {error}".replace("\n", " ")
            print(f"{path}\trefused\t{why[:300]}")


if __name__ == "__main__":
    main()
