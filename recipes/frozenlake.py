r"""StarPO on FrozenLake (gymnasium, slippery 4x4 maps).

    accelerate launch recipes/frozenlake.py --config recipes/configs/frozenlake.yaml
    accelerate launch --config_file recipes/accelerate_configs/multi_gpu.yaml --num_processes 2 \
        recipes/frozenlake.py --config recipes/configs/frozenlake.yaml
    accelerate launch recipes/frozenlake.py --config recipes/configs/frozenlake.yaml --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct

The pipeline is `trl_starpo.recipes.run`; every StarPOConfig / ModelConfig field is a flag or a YAML key.
"""

from trl_starpo.recipes import run

if __name__ == "__main__":
    run(environment="frozenlake")
