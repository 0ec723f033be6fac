"""Models written in the suite (random init, nothing downloaded), the synthetic corpus they train
on, and their FLOP counts: `gpt2`, `llama`, `corpus`, `flops`."""
