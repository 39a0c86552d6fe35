"""A client generated from the service's OpenAPI document calls the running service.

``datamodel-code-generator`` (from the package registry, in the dev extra) writes the document's named
schemas as pydantic models; the calls take their method, path and authentication from the document's
operations (by ``operationId``) and security schemes, their bodies are the generated request models,
and every answer, refusals and probes included, is read back into the generated model the document
names for it.  Nothing here knows the service beyond the document."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from tests.batch.test_runner import good
from tests.fakes import ScriptedEngine
from tests.test_client import serve

KEY = "generated-client-key-0123456789abcdef"
REF = "#/components/schemas/"


class Generated:
    """The document, its models, and calls by operation id."""

    def __init__(self, url: str, folder: Path, token: str | None) -> None:
        self.url = url
        self.token = token
        self.document: dict[str, Any] = httpx.get(f"{url}/openapi.json", timeout=30, trust_env=False).json()
        spec = folder / "openapi.json"
        spec.write_text(httpx.get(f"{url}/openapi.json", timeout=30, trust_env=False).text)
        models = folder / "service_models.py"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "datamodel_code_generator",
                "--input",
                str(spec),
                "--input-file-type",
                "openapi",
                "--output-model-type",
                "pydantic_v2.BaseModel",
                "--formatters",
                "ruff-format",
                "--output",
                str(models),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        name = f"generated_models_{id(self)}"
        loaded = importlib.util.spec_from_file_location(name, models)
        assert loaded is not None and loaded.loader is not None
        self.models: ModuleType = importlib.util.module_from_spec(loaded)
        sys.modules[name] = self.models  # pydantic resolves the generated generics through it
        loaded.loader.exec_module(self.models)
        self.operations = {
            operation["operationId"]: (method.upper(), path, operation)
            for path, operations in self.document["paths"].items()
            for method, operation in operations.items()
        }

    def call(self, operation_id: str, body: Any = None, token: bool = True, **path: str) -> tuple[int, Any]:
        """Call an operation; its answer read into the model the document names for its status."""
        method, template, operation = self.operations[operation_id]
        headers = {}
        for requirement in operation.get("security", []):
            for scheme in requirement:
                declared = self.document["components"]["securitySchemes"][scheme]
                assert (declared["type"], declared["scheme"]) == ("http", "bearer")
                if token and self.token is not None:
                    headers["authorization"] = f"Bearer {self.token}"
        content = None if body is None else body.model_dump_json(exclude_none=True)
        if content is not None:
            headers["content-type"] = "application/json"
        response = httpx.request(
            method, self.url + template.format(**path), content=content, headers=headers, timeout=60, trust_env=False
        )
        answer = operation["responses"][str(response.status_code)]["content"]
        if "text/plain" in answer:
            return response.status_code, response.text
        name = answer["application/json"]["schema"]["$ref"].removeprefix(REF)
        return response.status_code, getattr(self.models, name).model_validate(response.json())


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Generated]:
    with serve(ScriptedEngine(good), key=KEY, gates=("sufficiency", "recovery")) as url:
        yield Generated(url, tmp_path_factory.mktemp("generated"), KEY)


def _items(models: ModuleType, *questions: str) -> Any:
    items = [models.Item(id=f"q{i}", question=q, chunks=["Ada Lovelace wrote it."]) for i, q in enumerate(questions)]
    return models.SufficiencyRequest(models.SufficiencyItems(items=models.ItemList(items)))


def test_a_generated_client_judges_with_the_token_the_document_asks_for(generated: Generated) -> None:
    status, answer = generated.call("judge_sufficiency", _items(generated.models, "Who wrote it?", "When?"))
    assert status == 200 and isinstance(answer, generated.models.SufficiencyResponse)
    assert [row.root.index for row in answer.results] == [0, 1]
    assert isinstance(answer.results[0].root.verdict, generated.models.SufficiencyVerdict)


def test_a_generated_client_sends_one_item_as_the_document_allows(generated: Generated) -> None:
    one = generated.models.SufficiencyRequest(generated.models.Item(id="x", question="Who?", chunks=["Ada."]))
    status, answer = generated.call("judge_sufficiency", one)
    assert status == 200 and answer.results[0].root.id == "x"


def test_a_refusal_reads_into_the_error_schema(generated: Generated) -> None:
    status, answer = generated.call("judge_sufficiency", _items(generated.models, "Who?"), token=False)
    assert status == 401 and isinstance(answer, generated.models.Error) and "bearer token" in answer.detail


def test_a_refused_value_reads_into_the_validation_schema(generated: Generated) -> None:
    too_long = generated.models.SufficiencyRequest(generated.models.Item(id="x", question="Q" * 10_000_000))
    status, answer = generated.call("judge_sufficiency", too_long)
    assert status == 422 and isinstance(answer, generated.models.ValidationErrors)
    assert answer.detail[0].loc == ["body", "question"]


def test_the_probes_read_into_their_schemas(generated: Generated) -> None:
    health = generated.call("health")
    ready = generated.call("ready")
    assert health[0] == 200 and health[1].status.value == "alive"
    assert (
        ready[0] == 200
        and isinstance(ready[1], generated.models.Ready)
        and ready[1].gates == ["sufficiency", "recovery"]
    )


def test_settings_and_metrics_read_as_the_document_says(generated: Generated) -> None:
    status, settings = generated.call("get_gate_settings", gate="recovery")
    assert status == 200 and settings.gate == "recovery" and "prompt_version" in settings.settings
    status, text = generated.call("get_metrics")
    assert status == 200 and "suffice_requests_total" in text


@pytest.mark.engine
def test_a_generated_client_calls_the_real_service(suffice_server: str, tmp_path: Path) -> None:
    from tests.vllm_server import SERVE_KEY

    client = Generated(suffice_server, tmp_path, SERVE_KEY)
    status, answer = client.call("judge_sufficiency", _items(client.models, "Who wrote it?"))
    assert status == 200 and isinstance(answer.results[0].root.verdict, client.models.SufficiencyVerdict)
