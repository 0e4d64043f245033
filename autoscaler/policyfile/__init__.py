"""The YAML policy language: loading files into ``core.spec`` models with file/line/column errors, and JSON Schema."""
