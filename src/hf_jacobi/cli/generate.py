"""`hf-jacobi generate`: stream one answer with Jacobi decoding; with --compare, check it against greedy."""

from __future__ import annotations

import argparse

import torch
from transformers import TextStreamer

from .arg_types import non_negative_int, positive_float, probability
from .common import (
    CliError,
    add_model_arguments,
    describe_settings,
    encode_prompt,
    jacobi_config,
    load_model,
    summary,
    warm_up,
)
from .exactness import greedy_verdict


def run_generate(args: argparse.Namespace) -> int:
    """Streams a Jacobi answer to stdout and summarizes its cost; with --compare, checks it against greedy."""
    loaded = load_model(args.model, args.dtype, args.jacobi_forcing, args.adapter)
    model, tokenizer = loaded.model, loaded.tokenizer
    inputs = {
        k: v.to(model.device) for k, v in encode_prompt(tokenizer, args.prompt, not args.no_chat_template).items()
    }
    prompt_width = inputs["input_ids"].shape[1]
    if prompt_width == 0:
        raise CliError(
            f"the prompt {args.prompt!r} encodes to no tokens with --no-chat-template; give a non-empty prompt, "
            "or drop --no-chat-template"
        )
    warm_up(loaded, inputs)

    if args.sample and args.compare:
        raise CliError("--compare checks that Jacobi equals greedy decoding; it cannot be combined with --sample")
    sampling = (
        {"do_sample": True, "temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k}
        if args.sample
        else {"do_sample": False}
    )
    settings = jacobi_config(args, model.generation_config)
    if args.sample:  # the only randomness here: greedy and Jacobi's own drafts leave torch's generator alone
        torch.manual_seed(args.seed)
    streamer = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
    jacobi = loaded.decode(inputs, args.max_new_tokens, settings, streamer=streamer, **sampling)
    summary_line = summary("jacobi", jacobi.new_tokens[0], jacobi.forwards[0], jacobi.seconds)
    print(f"{summary_line} ({describe_settings(settings)})")
    if not args.compare:
        return 0

    greedy = loaded.decode(inputs, args.max_new_tokens)
    print(summary("greedy", greedy.new_tokens[0], greedy.forwards[0], greedy.seconds))
    identical = all(jacobi.same_as(greedy))
    print(f"identical: {'yes' if identical else 'no'}")
    verdict, code = greedy_verdict(args.dtype, int(identical), 1, "answer")
    if not identical:
        print(verdict)
    return code


def add_parser(commands) -> None:
    generate = commands.add_parser("generate", help="stream one answer with Jacobi decoding")
    generate.add_argument("prompt", help="the user message (or raw text with --no-chat-template)")
    add_model_arguments(generate, max_new_tokens=128)
    generate.add_argument("--compare", action="store_true", help="also run greedy and check the outputs are identical")
    generate.add_argument("--no-chat-template", action="store_true", help="feed the prompt as raw text")
    generate.add_argument("--sample", action="store_true", help="sample (exactly as generate would) instead of greedy")
    generate.add_argument("--temperature", type=positive_float, default=1.0, help="with --sample (default 1.0)")
    generate.add_argument("--top-p", type=probability, default=1.0, help="with --sample (default 1.0)")
    generate.add_argument("--top-k", type=non_negative_int, default=0, help="with --sample, 0 = off (default 0)")
    generate.add_argument(
        "--seed", type=int, default=0, help="torch seed of --sample, for reproducible sampling (default 0)"
    )
    generate.set_defaults(handler=run_generate)
