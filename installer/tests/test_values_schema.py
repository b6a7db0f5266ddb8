"""A values file the charts' schemas refuse: helm's words read, each field traced to the file and line that set it."""

from __future__ import annotations

from pathlib import Path

from konduktor.errors import ExitCode
from konduktor.helm.schema import SchemaProblem, ValuesFile, blame, refusal, schema_problems

# What helm 4.2 prints for `helm template charts/konduktor-core -f bad.yaml` (recorded).
REFUSED = """Error: values don't meet the specifications of the schema(s) in the following chart(s):
konduktor-core:
- at '/controller/replicas': got string, want integer
- at '/controller': additional properties 'imagee' not allowed
"""


def test_helms_refusal_names_each_field_and_a_subcharts_under_its_key() -> None:
    assert schema_problems(REFUSED, "konduktor-core") == [
        SchemaProblem("konduktor-core", ("controller", "replicas"), "got string, want integer"),
        SchemaProblem("konduktor-core", ("controller", "imagee"), "additional properties 'imagee' not allowed"),
    ]
    # The same refusal from the umbrella: the field is under the subchart's key, as a values file sets it.
    [problem, _] = schema_problems(REFUSED, "konduktor")
    assert problem.field == "konduktor-core.controller.replicas"
    assert schema_problems("Error: template: x.yaml:3: function not defined", "konduktor-core") == []
    helm3 = "Error: values don't meet the specifications of the schema(s) in the following chart(s):\nkonduktor-core:\n"
    helm3 += "- controller.replicas: Invalid type. Expected: integer, given: string\n"
    helm3 += "- (root): Additional property controllr is not allowed\n"
    assert [p.keys for p in schema_problems(helm3, "konduktor-core")] == [("controller", "replicas"), ("controllr",)]


def test_the_file_and_line_that_set_the_field_are_named(tmp_path: Path) -> None:
    first, second = tmp_path / "base.yaml", tmp_path / "prod.yaml"
    first.write_text("controller:\n  replicas: 1\n")
    second.write_text("# prod\ncontroller:\n  port: 8080\n  replicas: two\n")
    files = [
        ValuesFile(first, {"controller": {"replicas": 1}}),
        ValuesFile(second, {"controller": {"port": 8080, "replicas": "two"}}),
    ]
    replicas = SchemaProblem("konduktor-core", ("controller", "replicas"), "got string, want integer")
    assert blame(replicas, files) == (second, 4)  # the later file wins, as helm merges them
    unset = SchemaProblem("konduktor-core", ("policies", "validationActions"), "x")
    assert blame(unset, files) is None
    error = refusal([replicas], files, tmp_path / "charts" / "konduktor-core")
    assert error.exit_code == ExitCode.BAD_INPUT
    assert error.message == f"{second}:4: controller.replicas: got string, want integer; nothing was changed"
