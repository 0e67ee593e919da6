"""A tool-calling chat template for the embedded SmolLM2 models.

SmolLM2-Instruct's own template is plain ChatML: it drops ``tools``, assistant ``tool_calls`` and
``tool`` messages, so TRL rejects it ("The provided chat template does not support tool calling").
:data:`TOOL_CALLING_CHAT_TEMPLATE` extends it the way Qwen2.5 and Hermes do: the tool signatures go
into the system turn inside ``<tools></tools>``, a call is written as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` and a tool's result comes back as a user
turn inside ``<tool_response></tool_response>``. Without tools it renders exactly what the original
template renders, so every prompt the project built before, and the adapters trained on them, are
unchanged. :data:`RESPONSE_TEMPLATE` tells ``tokenizer.parse_response`` (transformers >= 5.13) how
to read tool calls back out of a completion.

:func:`add_tool_calling` sets both on a tokenizer; :mod:`dynaweb_env.models` applies it to the
embedded models when it prepares them.
"""

from __future__ import annotations

from typing import Any

#: The original SmolLM2 ChatML template's default system turn, kept byte for byte.
_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

TOOL_CALLING_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    'within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": '
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\n" + _DEFAULT_SYSTEM + "<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if loop.first and tools and message['role'] == 'system' %}"
    "{%- elif message['role'] == 'assistant' and message.get('tool_calls') %}"
    "{{- '<|im_start|>assistant\\n' }}{%- if message['content'] %}{{- message['content'] + '\\n' }}{%- endif %}"
    "{%- for tool_call in message['tool_calls'] %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    '{{- \'<tool_call>\\n{"name": "\' + tool_call.name + \'", "arguments": \' }}'
    "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}{%- else %}"
    "{{- tool_call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}{%- if not loop.last %}{{- '\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

#: transformers' response template for :data:`TOOL_CALLING_CHAT_TEMPLATE`: free text, then any
#: number of ``<tool_call>`` JSON blocks, up to ``<|im_end|>``.
RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


def supports_tool_calling(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` already carries :data:`TOOL_CALLING_CHAT_TEMPLATE`."""
    return tokenizer.chat_template == TOOL_CALLING_CHAT_TEMPLATE


def add_tool_calling(tokenizer: Any) -> Any:
    """Give a SmolLM2 (ChatML) tokenizer the tool-calling template and its response template, in place.

    Raises:
        ValueError: If the tokenizer is not a ChatML one (its special tokens would not match).
    """
    if "<|im_start|>" not in tokenizer.get_vocab():
        raise ValueError("the tool-calling template is for ChatML tokenizers (<|im_start|> ... <|im_end|>)")
    tokenizer.chat_template = TOOL_CALLING_CHAT_TEMPLATE
    tokenizer.response_template = RESPONSE_TEMPLATE
    return tokenizer


__all__ = ["RESPONSE_TEMPLATE", "TOOL_CALLING_CHAT_TEMPLATE", "add_tool_calling", "supports_tool_calling"]
