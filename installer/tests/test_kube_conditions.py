"""The one reading of an object's status conditions, on what the API server returns for a new object."""

from __future__ import annotations

from konduktor.kube.conditions import condition, is_true


def test_a_new_object_whose_conditions_are_null_has_none_of_them() -> None:
    # A CRD just created, or a Kueue object before its controller ran: `status.conditions` is null, not absent.
    new = {"metadata": {"name": "prometheuses.monitoring.coreos.com"}, "status": {"conditions": None}}
    assert condition(new, "Established") is None
    assert not is_true(new, "Established")
    assert not is_true({"metadata": {"name": "x"}}, "Established")  # no status at all
    assert not is_true(None, "Established")  # no object


def test_a_condition_is_true_only_when_its_status_says_so() -> None:
    crd = {
        "status": {
            "conditions": [{"type": "NamesAccepted", "status": "True"}, {"type": "Established", "status": "False"}]
        }
    }
    assert not is_true(crd, "Established")
    crd["status"]["conditions"][1]["status"] = "True"
    assert is_true(crd, "Established")
    found = condition(crd, "Established")
    assert found == {"type": "Established", "status": "True"}
    found["status"] = "False"  # a copy: the object is not changed through it
    assert is_true(crd, "Established")
