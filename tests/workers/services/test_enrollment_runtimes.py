"""Real chips enroll only on a host that has their stack's runtime; the refusal names what to install."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from fleet.models import Node, Pool
from workers.models import EnrollmentToken

pytestmark = pytest.mark.django_db


def enroll(chip_type: str, *, simulated: bool, **extra):
    _, raw = EnrollmentToken.issue(Pool.objects.filter(chip_type__slug=chip_type).first(), chips=8)
    body = {"enrollment_token": raw, "hostname": "host-1", "chip_type": chip_type, "chips": 8, "simulated": simulated}
    return APIClient().post("/api/v1/agent/enroll/", {**body, **extra}, format="json")


def test_real_ascend_chips_on_a_host_without_torch_npu_are_refused_naming_it(catalog):
    response = enroll("ascend-910b", simulated=False, runtimes=["cuda"])
    assert response.status_code == 403
    body = response.json()
    assert body["code"] == "stack_runtime_missing"
    assert "CANN" in body["detail"] and "torch_npu" in body["detail"] and "runtimes found: cuda" in body["detail"]
    assert not Node.objects.filter(hostname="host-1").exists()
    assert EnrollmentToken.objects.get().uses == 0  # the refused enrollment used nothing up


@pytest.mark.parametrize(
    ("chip_type", "runtimes"), [("ascend-910b", ["cann"]), ("mlu370", ["bang", "cuda"]), ("tpu-v5e", ["xla"])]
)
def test_real_chips_enroll_where_their_stacks_runtime_is_found(catalog, chip_type, runtimes):
    assert enroll(chip_type, simulated=False, runtimes=runtimes).status_code == 201


def test_simulated_chips_of_any_stack_need_no_runtime_they_train_on_the_cpu(catalog):
    assert enroll("tpu-v5e", simulated=True, runtimes=[]).status_code == 201


def test_an_agent_that_predates_the_runtimes_list_still_enrolls_its_cuda_gpus(catalog):
    assert enroll("rtx-4090", simulated=False).status_code == 201


def test_real_cuda_chips_declared_without_a_cuda_runtime_are_refused(catalog):
    response = enroll("h100-80g", simulated=False, runtimes=[])
    assert response.status_code == 403
    assert "CUDA" in response.json()["detail"]


def test_an_unknown_runtime_is_a_400_naming_the_field(catalog):
    response = enroll("rtx-4090", simulated=False, runtimes=["rocm"])
    assert response.status_code == 400
    assert "runtimes" in response.json()["errors"]
