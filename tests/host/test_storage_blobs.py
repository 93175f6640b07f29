"""The blob trigger on real hosts against Azurite: each new or changed blob runs its function
once with two hosts and across a restart (receipts in ``azure-webjobs-hosts``), the function
gets an ``InputStream`` with the blob's name and length and the path's captures, and a blob
that keeps failing goes to ``webjobs-blobtrigger-poison`` after ``poisonBlobThreshold`` (2 in
the test app). Scans every 0.3 s here (``DURABLE_HOST_BLOB_SCAN_SECONDS``)."""

from __future__ import annotations

import json

from tests.harness import HostProcess, wait_for
from tests.host.storage_support import APP, Account, as_json, env, unique


def scans(host: HostProcess) -> int:
    blobs = host.get("/admin/host/scale").json()["blobs"]
    return min(int(b["scans"]) for b in blobs)


def test_each_blob_runs_once_with_two_hosts_and_a_restart_and_a_failing_one_is_poisoned(
    make_host, storage_account: str
):
    account = Account(storage_account)
    host_id = unique("host-")
    settings = env(storage_account, AzureFunctionsWebHost__hostid=host_id)
    hosts = [make_host(APP, env=settings, name=f"b{i}").start() for i in range(2)]
    samples = settings["SAMPLES_CONTAINER"]  # this test's own (storage_support.env)
    names = [unique("s") for _ in range(4)]
    bad = unique("bad")
    account.put_blob("bad", bad, "x")
    for name in names:
        account.put_blob(samples, f"{name}.txt", f"text of {name}")

    for name in names:
        done = as_json(account.wait_blob("processed", f"{name}.txt"))
        assert done == {
            "name": f"{samples}/{name}.txt",
            "length": len(f"text of {name}"),
            "upper": f"TEXT OF {name}".upper(),
        }
    hosts[0].kill()
    restarted = make_host(APP, env=settings, name="b0").start()
    before = scans(restarted)
    wait_for(lambda: scans(restarted) >= before + 3, 30, "three scans after the restart")

    def runs_of(name: str) -> int:
        return sum(r["blob"] == f"{samples}/{name}.txt" for r in account.runs("samples"))

    assert [runs_of(n) for n in names] == [1] * len(names)

    # A changed blob (a new ETag) runs once more.
    account.put_blob(samples, f"{names[0]}.txt", "changed")
    wait_for(
        lambda: as_json(account.blob("processed", f"{names[0]}.txt"))["upper"] == "CHANGED",
        30,
        "the changed blob's run",
    )
    before = scans(restarted)
    wait_for(lambda: scans(restarted) >= before + 3, 30, "three more scans")
    assert runs_of(names[0]) == 2

    # The failing blob: poisonBlobThreshold (2) attempts, then the extension's poison message.
    poisoned = wait_for(
        lambda: [json.loads(m) for m in account.messages("webjobs-blobtrigger-poison") if bad in m],
        60,
        "the poison message",
    )
    assert poisoned[0] == {
        "Type": "BlobTrigger",
        "FunctionId": "Host.Functions.on_bad",
        "BlobType": "BlockBlob",
        "ContainerName": "bad",
        "BlobName": bad,
        "ETag": poisoned[0]["ETag"],
    }
    receipts = account.blobs.get_container_client("azure-webjobs-hosts")
    found = list(
        receipts.list_blobs(f"blobreceipts/{host_id}/Host.Functions.on_bad/", include=["metadata"])
    )
    # (Other tests' bad blobs share the container: this host id has receipts for them too.)
    assert [b.metadata["Attempts"] for b in found if b.name.endswith(f"/bad/{bad}")] == ["2"]


def test_a_blob_written_by_an_output_binding_wakes_the_blob_trigger(
    make_host, storage_account: str
):
    """Scans a minute apart here: the blob's run comes from the host's own write, at once."""
    account = Account(storage_account)
    settings = env(
        storage_account,
        AzureFunctionsWebHost__hostid=unique("host-"),
        DURABLE_HOST_BLOB_SCAN_SECONDS="60",
    )
    host = make_host(APP, env=settings).start()
    wait_for(lambda: scans(host) >= 1, 30, "the first scan")
    name = unique("w")

    assert host.request("PUT", f"/api/samples/{name}", raw=b"chained").status == 200

    done = as_json(account.wait_blob("processed", f"{name}.txt", 20))
    assert done["upper"] == "CHAINED"
