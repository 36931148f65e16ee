"""Schemathesis hooks for tests/api/openapi_contract_test.sh, applied to every job spec sent (all phases,
valid and invalid cases alike) just before the call.

1. Generated specs may name any program in `command`, and the test's worker would run it: a spec whose
   `command` is absent or a valid list gets ["/bin/true"] instead, so no generated program ever runs
   and placed jobs finish at once. An invalid `command` is kept: the server must refuse it.
2. The rules that compare two fields (JobSpec's description in docs/openapi.yaml lists them;
   spec/job_spec.cc enforces them) cannot be stated in JSON Schema, so a generated spec may break one
   and be refused although the document calls it valid. Where the fields involved hold valid values,
   the spec is brought within the rule by changing one of them to another valid value; whatever made
   an invalid case invalid is left as it was, so the server must still refuse it.
3. GetLogs with a valid follow=true is sent with follow=false (see before_call).
And one check of eft's own: forbidden_calls_are_refused."""
import os

import schemathesis

SAFE_COMMAND = ["/bin/true"]


def _spec_of(body):
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("spec"), dict):  # a SubmitJobRequest
        return body["spec"]
    return body  # a bare JobSpec


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _dict(parent, key):
    value = parent.get(key) if isinstance(parent, dict) else None
    return value if isinstance(value, dict) else None


def keep_within_cross_field_rules(spec):
    """Changes only a field that holds a valid value, to another valid value."""
    nodes = _dict(_dict(spec, "resources"), "nodes")
    if nodes:  # resources.nodes.max >= resources.nodes.min
        low, high = nodes.get("min"), nodes.get("max")
        if _is_number(low) and _is_number(high) and 1 <= high <= 10000 and high < low:
            nodes["max"] = low
    training = _dict(spec, "training")
    if training:
        micro, total = training.get("microBatchSize"), training.get("globalBatchSize")
        if total is None:
            total = 32
        if _is_number(micro) and _is_number(total) and total >= 1 and micro > total:
            training["globalBatchSize"] = micro  # microBatchSize <= globalBatchSize
        schedule = _dict(training, "schedule")
        lr = training.get("lr")
        if lr is None:
            lr = 1e-5
        if schedule and _is_number(schedule.get("minLr")) and _is_number(lr) and lr > 0 and schedule["minLr"] > lr:
            training["lr"] = schedule["minLr"]  # schedule.minLr <= lr
    checkpoint = _dict(spec, "checkpoint")
    if checkpoint and checkpoint.get("mergeLora") is True and (training is None or training.get("lora") is None):
        checkpoint["mergeLora"] = False  # mergeLora needs training.lora
    if (checkpoint and checkpoint.get("exportGguf") and training is not None and training.get("lora") is not None
            and checkpoint.get("mergeLora") is not True):
        checkpoint["exportGguf"] = ""  # a LoRA run's exportGguf needs mergeLora
    data = _dict(spec, "data")
    if data:
        evals = data.get("eval")
        fraction = data.get("evalFraction")
        if evals and isinstance(evals, (str, list, dict)) and _is_number(fraction) and 0 < fraction < 1:
            data["evalFraction"] = 0  # data.eval or data.evalFraction, not both
        if isinstance(evals, list):  # unique names: a valid later duplicate is dropped
            seen, kept = set(), []
            for item in evals:
                valid = (isinstance(item, dict) and set(item) == {"name", "path"} and isinstance(item["name"], str)
                         and isinstance(item["path"], str) and item["path"] != "")
                if valid and item["name"] in seen:
                    continue
                if isinstance(item, dict) and isinstance(item.get("name"), str):
                    seen.add(item["name"])
                kept.append(item)
            data["eval"] = kept


FOLLOW_TRUE = {"true", "1", ""}


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    # 3. A followed log stays open until the job ends, and a generated job may wait for nodes forever:
    #    a valid follow=true becomes false (following is tested in tests/e2e/rest_test.cc).
    if case.operation.path == "/v1/jobs/{id}/logs" and isinstance(case.query, dict):
        follow = case.query.get("follow")
        if follow is True or (isinstance(follow, str) and follow.lower() in FOLLOW_TRUE):
            case.query["follow"] = "false" if isinstance(follow, str) else False
        return
    if case.operation.method.upper() != "POST" or case.operation.path != "/v1/jobs":
        return
    spec = _spec_of(case.body)
    if spec is None:
        return
    command = spec.get("command")
    if command is None or (isinstance(command, list) and all(isinstance(c, str) for c in command)):
        spec["command"] = list(SAFE_COMMAND)
    keep_within_cross_field_rules(spec)


# The role the run's token has (openapi_contract_test.sh sets it): "" without authentication.
ROLE = os.environ.get("EFT_CONTRACT_ROLE", "")
ADMIN_ONLY = {("POST", "/v1/nodes/{name}:drain"), ("POST", "/v1/nodes/{name}:undrain")}


@schemathesis.check
def forbidden_calls_are_refused(ctx, response, case):
    """A call the run's role may not make never succeeds and never fails the server: draining or
    undraining as a submitter; submitting above max_submitter_priority (0 here) as a submitter."""
    if ROLE != "submitter":
        return
    key = (case.operation.method.upper(), case.operation.path)
    if key in ADMIN_ONLY and not (400 <= response.status_code < 500 and response.status_code != 401):
        raise AssertionError(f"{key[0]} {key[1]} as a submitter answered {response.status_code}, not a refusal")
    if key == ("POST", "/v1/jobs"):
        spec = _spec_of(case.body)
        priority = spec.get("priority") if spec is not None else None
        if _is_number(priority) and priority > 0 and 200 <= response.status_code < 300:
            raise AssertionError(f"a submitter's job of priority {priority} was accepted ({response.status_code})")
        if _is_number(priority) and priority > 0 and response.status_code >= 500:
            raise AssertionError(f"a submitter's job of priority {priority} failed the server")
