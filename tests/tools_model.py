"""Copy a GGUF model with a Hermes-style chat template that knows tools, as Qwen 2.5's does.

Usage: python tests/tools_model.py IN.gguf OUT.gguf [--opens-thinking]
The template (written here for the tests) lists the tools in the system turn inside <tools>,
writes an assistant's calls as <tool_call> blocks and a tool's result inside <tool_response>,
and reads `enable_thinking`. With --opens-thinking its assistant turn opens a thinking block
itself (`<think>` at the end of the prompt), as DeepSeek R1's template does. Uses the `gguf` package (llama.cpp's gguf-py) to rewrite the
header; the tensors are copied as they are.
"""
import sys

import gguf
from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

TEMPLATE = """{%- if tools %}
<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}You may call one or more functions. The functions are listed in <tools></tools>:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>
For each call, write a JSON object with the function name and arguments in <tool_call></tool_call> tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'system' %}
{%- elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% elif message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant
{% if message.content %}{{ message.content }}
{% endif %}{% for call in message.tool_calls %}<tool_call>
{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}
</tool_call>
{% endfor %}<|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% endif %}{% endif %}"""


def main() -> None:
    src, dst = sys.argv[1], sys.argv[2]
    template = TEMPLATE
    if "--opens-thinking" in sys.argv[3:]:
        template = template.replace("{% endif %}{% endif %}", "{% else %}<think>\n{% endif %}{% endif %}")
    reader = gguf.GGUFReader(src, "r")
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    writer = gguf.GGUFWriter(dst, arch=arch, endianess=reader.endianess)
    new = {gguf.Keys.Tokenizer.CHAT_TEMPLATE: MetadataDetails(gguf.GGUFValueType.STRING, template)}
    copy_with_new_metadata(reader, writer, new, [])
    print(f"wrote {dst} with a tools template")


if __name__ == "__main__":
    main()
