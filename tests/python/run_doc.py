"""ctest python_docs: runs the ```python blocks of a Markdown file in order, in one
namespace, in an empty working directory, so the guide's examples stay true.

python run_doc.py DOC.md WORK_DIR
"""
import os
import re
import sys

doc, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
with open(doc) as f:
    text = f.read()
blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
if not blocks:
    sys.exit(f"{doc}: no ```python block")
os.makedirs(work, exist_ok=True)
os.chdir(work)
ns = {"__name__": "__main__"}
for i, code in enumerate(blocks, 1):
    line = text[: text.index(code)].count("\n") + 1
    print(f"--- {os.path.basename(doc)} block {i} (line {line})", flush=True)
    exec(compile(code, f"{doc}:block{i}@{line}", "exec"), ns)
print(f"{len(blocks)} passed, 0 failed")
