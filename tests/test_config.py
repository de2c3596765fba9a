"""Engine configuration: defaults, normalization and the reference's error wording."""
import json

import pytest

from conftest import GOLDEN
from mocker.config import ConfigError, load_config, normalize_config

NORMALIZE = json.loads((GOLDEN / "config_normalize.json").read_text())


@pytest.mark.parametrize("case", [k for k, v in NORMALIZE.items() if "output" in v])
def test_normalize_matches_reference(case):
    assert normalize_config(NORMALIZE[case]["input"]) == NORMALIZE[case]["output"]


def test_flat_form_is_accepted_and_equals_canonical():
    flat = normalize_config({"block_size": 16, "num_gpu_blocks": 100, "dp_size": 1})
    canonical = normalize_config({"engine": {"block_size": 16, "num_gpu_blocks": 100}})
    assert flat == canonical


def test_flat_form_conflict_is_rejected():
    with pytest.raises(ConfigError, match="block_size"):
        normalize_config({"block_size": 16, "engine": {"block_size": 32}})


def test_bad_json_names_the_problem():
    with pytest.raises(ConfigError, match="not valid JSON"):
        normalize_config("{block_size: 1}")


def test_config_from_file(tmp_path):
    p = tmp_path / "engine.json"
    p.write_text(json.dumps({"engine": {"num_gpu_blocks": 10}}))
    assert load_config(str(p))["engine"]["num_gpu_blocks"] == 10
    with pytest.raises(ConfigError, match="cannot read engine args file"):
        load_config(str(tmp_path / "missing.json"))
