"""`hf-jacobi evaluate`: held-out tokens per forward and answer quality of a model before and after training."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from trl import ModelConfig

from ..adapters import apply_adapter
from ..atomic import check_writable, write_text
from ..data.prompts import encode_prompts
from .recipe_args import (
    PromptArguments,
    check_model_arguments,
    check_model_name,
    jacobi_variants,
    load_model_and_tokenizer,
    parse_step_arguments,
)


@dataclass
class EvaluateArguments(PromptArguments):
    adapter: str | None = field(
        default=None, metadata={"help": "A LoRA adapter folder to evaluate on top of the model."}
    )
    trained_model: str | None = field(default=None, metadata={"help": "A fully fine-tuned checkpoint to compare."})
    block_size: int = field(default=16, metadata={"help": "Jacobi block size n of every measured setting."})
    settings: list[str] = field(
        default_factory=lambda: ["plain", "both"],
        metadata={"help": "Jacobi variants to measure: plain, recycling, multi-block, both (as in hf-jacobi bench)."},
    )
    max_new_tokens: int = field(default=64, metadata={"help": "Tokens to generate per prompt."})
    batch_size: int = field(default=8, metadata={"help": "Prompts decoded together (left-padded)."})
    output_file: str | None = field(default=None, metadata={"help": "Write the results as JSON here."})
    humaneval_nll: bool = field(
        default=False,
        metadata={"help": "Also score the NLL per token of HumanEval's 164 canonical solutions under each model."},
    )

    def __post_init__(self) -> None:
        """Refuses counts a run could not use and two trained models at once, before any model loads."""
        for name in ("block_size", "max_new_tokens", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")
        if self.adapter is not None and self.trained_model is not None:
            raise ValueError(
                f"adapter={self.adapter!r} and trained_model={self.trained_model!r} both name the trained model: "
                "give one (run evaluate once per trained model)."
            )


def run_evaluate(argv: list[str]) -> int:
    """Held-out figures of the base model and, if given, the trained one: tokens per forward of each Jacobi variant,
    greedy answers' distinct 3-grams, and the NLL of the base model's answers; exit 1 if any output differs."""
    from ..training.evaluation import canonical_solution_nll, evaluate_model

    args, model_args = parse_step_arguments("evaluate", (EvaluateArguments, ModelConfig), argv)
    check_model_arguments(model_args, adapter=args.adapter)
    check_model_name(args.trained_model, "--trained_model")
    settings = jacobi_variants(args.settings, args.block_size)
    if args.output_file:
        check_writable(args.output_file, folder=False, what="--output_file")
    prompts = args.load()
    args.prompt_split = args.resolved_split()  # the record names the split read, also where the source chose it
    model, tokenizer = load_model_and_tokenizer(model_args)
    prompt_ids = encode_prompts(prompts, tokenizer, chat=args.chat_template)
    measure = {"max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size}
    base, base_answers = evaluate_model(model, prompt_ids, settings, **measure)
    results = {"model": model_args.model_name_or_path, "prompts": args.prompts, "split": args.prompt_split}
    results["base"] = base.to_dict()
    if args.humaneval_nll:
        results["base"]["humaneval_canonical_nll"] = canonical_solution_nll(model, tokenizer)
    trained = None
    if args.adapter:
        trained = apply_adapter(model, args.adapter)
    elif args.trained_model:
        trained_args = ModelConfig(
            model_name_or_path=args.trained_model,
            dtype=model_args.dtype,
            attn_implementation=model_args.attn_implementation,
        )
        trained, _ = load_model_and_tokenizer(trained_args, flag="--trained_model")
    if trained is not None:
        figures, _ = evaluate_model(trained, prompt_ids, settings, reference_answers=base_answers, **measure)
        results["trained"] = figures.to_dict()
        if args.humaneval_nll:
            nll = canonical_solution_nll(trained, tokenizer)
            results["trained"]["humaneval_canonical_nll"] = nll
            results["trained"]["humaneval_canonical_nll_vs_base"] = nll / results["base"]["humaneval_canonical_nll"]
    print(json.dumps(results, indent=2))
    if args.output_file:
        write_text(args.output_file, json.dumps({**results, "settings": asdict(args)}, indent=2))
    ok = all(s["identical_to_greedy"] for k in ("base", "trained") if k in results for s in results[k]["settings"])
    return 0 if ok else 1
