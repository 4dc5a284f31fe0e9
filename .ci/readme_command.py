"""Print the README's N-th shell command (the first line of the N-th ```bash block that is not a comment),
so CI runs exactly what a new user copies."""

import re
import sys
from pathlib import Path

blocks = re.findall(r"```bash\n(.*?)```", Path(sys.argv[2] if len(sys.argv) > 2 else "README.md").read_text(), re.S)
n = int(sys.argv[1])
lines = [line for line in blocks[n - 1].splitlines() if line.strip() and not line.lstrip().startswith("#")]
print(" && ".join(lines) if len(lines) > 1 else lines[0])
