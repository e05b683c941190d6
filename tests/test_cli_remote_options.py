"""``--storage-options`` and ``--source-storage-options`` on info, verify, composite, mount
and repack, against the loopback S3 server: credentials come from the command line, not
only from the environment, and bad options are refused in one line that never echoes them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import scipy.sparse as sp
from conftest import realistic_counts
from s3_server import S3Server

import cytearc_vfs as cv
from cytearc_vfs.cli import main

pytestmark = pytest.mark.remote


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    """``main``'s status and its JSON payload (``--json`` added)."""
    try:
        code = main([*argv, "--json"])
    except SystemExit as exited:
        code = int(exited.code or 0)
    captured = capsys.readouterr()
    return code, json.loads(captured.out)


@pytest.fixture(scope="module")
def counts() -> sp.csr_array:
    return realistic_counts(90, 30, seed=11)


@pytest.fixture(scope="module")
def remote(s3_server: S3Server, counts: sp.csr_array) -> dict[str, str]:
    """Two ordinary stores in a bucket, and the options that reach them."""
    bucket = s3_server.new_bucket()
    options = s3_server.storage_options()
    places = {"a": f"s3://{bucket}/a.zarr", "b": f"s3://{bucket}/b.zarr"}
    cv.write_counts(places["a"], counts, storage_options=options)
    cv.write_counts(places["b"], counts * 2, storage_options=options)
    return {**places, "bucket": bucket, "options": json.dumps(options)}


def test_info_and_verify_of_a_remote_store(
    remote: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, payload = _run(["info", remote["a"], "--storage-options", remote["options"]], capsys)
    assert code == 0, payload
    assert payload["kind"] == "ordinary" and payload["assays"][0]["shape"] == [90, 30]
    options_file = tmp_path / "s3.json"
    options_file.write_text(remote["options"])
    code, payload = _run(["verify", remote["a"], "--storage-options", f"@{options_file}"], capsys)
    assert code == 0 and payload["ok"], payload
    assert payload["assays"][0]["checkedValues"] > 0
    # an ordinary store has no sources: their options are a mistake, said so
    code, payload = _run(
        [
            "info",
            remote["a"],
            "--storage-options",
            remote["options"],
            "--source-storage-options",
            "{}",
        ],
        capsys,
    )
    assert code == 2 and "apply to a composite's or a mount's sources" in payload["message"]


def test_composite_of_remote_sources(
    remote: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = json.loads(remote["options"])
    by_name = json.dumps({"a": options, "b": options})
    composite = str(tmp_path / "both.zarr")
    argv = ["composite", composite, f"a={remote['a']}", f"b={remote['b']}"]
    code, payload = _run([*argv, "--source-storage-options", by_name], capsys)
    assert code == 0, payload
    assert payload["shape"] == [180, 30] and payload["sources"] == ["a", "b"]
    code, payload = _run(["info", composite, "--source-storage-options", by_name], capsys)
    assert code == 0 and payload["kind"] == "composite", payload
    code, payload = _run(["verify", composite, "--source-storage-options", by_name], capsys)
    assert code == 0 and payload["ok"], payload
    # options keyed by a name that is not a source, or not an object: refused, nothing made
    for wrong, words in (
        ({"c": options}, "'c', which is not one of the sources (a)"),
        ({"a": "s3cr3t"}, "entry 'a' must be a JSON object"),
    ):
        other = tmp_path / "wrong.zarr"
        code, payload = _run(
            [
                "composite",
                str(other),
                f"a={remote['a']}",
                "--source-storage-options",
                json.dumps(wrong),
            ],
            capsys,
        )
        assert code == 2 and words in payload["message"], payload
        assert "s3cr3t" not in payload["message"] and not other.exists()


def test_composite_written_to_a_remote_destination(
    remote: dict[str, str], tmp_path: Path, counts: sp.csr_array, capsys: pytest.CaptureFixture[str]
) -> None:
    local = tmp_path / "local.zarr"
    cv.write_counts(local, counts)
    destination = f"s3://{remote['bucket']}/composite.zarr"
    own = ["--storage-options", remote["options"]]
    code, payload = _run(["composite", destination, f"l={local}", *own], capsys)
    assert code == 0 and payload["shape"] == [90, 30], payload
    code, payload = _run(["info", destination, *own], capsys)
    assert code == 0 and payload["kind"] == "composite", payload
    # the destination is looked at with the same options: it holds a store now
    code, payload = _run(["composite", destination, f"l={local}", *own], capsys)
    assert code == 2 and "--overwrite" in payload["message"], payload


def test_mount_and_repack_of_a_remote_source(
    remote: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sources = ["--source-storage-options", remote["options"]]
    mount = str(tmp_path / "mount.zarr")
    code, payload = _run(["mount", remote["a"], mount, *sources], capsys)
    assert code == 0 and payload["assays"] == ["RNA"], payload
    code, payload = _run(["info", mount, *sources], capsys)
    assert code == 0 and payload["kind"] == "mount", payload
    code, payload = _run(["verify", mount, *sources], capsys)
    assert code == 0 and payload["ok"], payload
    # the source's artifacts show through the mount, read with the source's options
    with cv.publish_artifact(
        cv.open_store(remote["a"], mode="r+", storage_options=json.loads(remote["options"])),
        "RNA/artifacts",
        "pca",
        provenance={"operation": "test.pca", "parameters": {}, "inputs": {}},
    ) as art:
        art.write_array("x", [[1.0]])
    code, payload = _run(["artifacts", mount, *sources], capsys)
    assert code == 0 and [a["kind"] for a in payload["artifacts"]] == ["pca"], payload
    code, payload = _run(["artifacts", remote["a"], "--storage-options", remote["options"]], capsys)
    assert code == 0 and len(payload["artifacts"]) == 1, payload
    # the mount's counts are in the bucket: repack reads them with the source's options
    code, payload = _run(["repack", mount, str(tmp_path / "standalone.zarr"), *sources], capsys)
    assert code == 0, payload
    # a remote ordinary store is repacked with its own options
    own = ["--storage-options", remote["options"]]
    code, payload = _run(["repack", remote["b"], str(tmp_path / "copy.zarr"), *own], capsys)
    assert code == 0, payload
    code, payload = _run(["info", str(tmp_path / "copy.zarr")], capsys)
    assert code == 0 and payload["assays"][0]["shape"] == [90, 30], payload


def test_repack_to_a_remote_destination(
    remote: dict[str, str], tmp_path: Path, counts: sp.csr_array, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--destination-storage-options`` reach DEST (``--storage-options`` are SOURCE's)."""
    local = tmp_path / "local.zarr"
    cv.write_counts(local, counts)
    destination = f"s3://{remote['bucket']}/repacked.zarr"
    theirs = ["--destination-storage-options", remote["options"]]
    code, payload = _run(["repack", str(local), destination, *theirs], capsys)
    assert code == 0 and payload["location"] == destination, payload
    code, payload = _run(["verify", destination, "--storage-options", remote["options"]], capsys)
    assert code == 0 and payload["ok"], payload
    # the destination is looked at with the same options: it holds a store now
    code, payload = _run(["repack", str(local), destination, *theirs], capsys)
    assert code == 2 and "--overwrite" in payload["message"], payload
    code, payload = _run(["repack", str(local), destination, *theirs, "--overwrite"], capsys)
    assert code == 0, payload
    # from Python, with a remote source too, and --data-only's writer
    options = json.loads(remote["options"])
    for data_only in (False, True):
        again = f"s3://{remote['bucket']}/again{int(data_only)}.zarr"
        store = cv.repack(
            remote["b"],
            again,
            data_only,
            storage_options=options,
            destination_storage_options=options,
        )
        read = cv.VirtualArrayReader(store).read()
        assert (read != (counts * 2).toarray()).sum() == 0
    # the value is never echoed, even where the option is unknown
    code, payload = _run(
        ["info", destination, "--destination-storage-options", '{"k": "s3cr3t"}'], capsys
    )
    assert code == 2 and "s3cr3t" not in payload["message"], payload


@pytest.mark.parametrize(
    "command",
    [
        ["info", "LOCATION"],
        ["verify", "LOCATION"],
        ["composite", "NEW", "a=LOCATION"],
        ["mount", "LOCATION", "NEW"],
        ["repack", "LOCATION", "NEW"],
    ],
    ids=lambda words: words[0],
)
@pytest.mark.parametrize("option", ["--storage-options", "--source-storage-options"])
def test_malformed_and_missing_options_are_refused(
    command: list[str],
    option: str,
    remote: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [
        {
            "LOCATION": remote["a"],
            "NEW": str(tmp_path / "new.zarr"),
            "a=LOCATION": f"a={remote['a']}",
        }.get(word, word)
        for word in command
    ]
    # malformed JSON: refused, the value (a credential) never echoed
    code, payload = _run([*argv, option, '{"secret_access_key": s3cr3t'], capsys)
    assert code == 2 and f"{option} is not JSON" in payload["message"], payload
    assert "s3cr3t" not in json.dumps(payload)
    missing = tmp_path / "absent.json"
    code, payload = _run([*argv, option, f"@{missing}"], capsys)
    assert code == 2, payload
    assert f"{option} @FILE: {missing} does not exist" in payload["message"]
    assert not (tmp_path / "new.zarr").exists()


def test_a_source_remedy_names_the_option_as_the_caller_writes_it(
    s3_server: S3Server,
    remote: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    composite = tmp_path / "c.zarr"
    cv.create_composite(
        composite, {"a": remote["a"]}, source_storage_options={"a": s3_server.storage_options()}
    )
    wrong = {"a": s3_server.unreachable_options()}
    # Python callers read the keyword argument
    with pytest.raises(OSError, match="cannot be read") as raised:
        cv.open_store(composite, source_storage_options=wrong)
    assert "source_storage_options={'a': {...}}" in str(raised.value)
    assert "--source-storage-options" not in str(raised.value)
    # the command line names its flag, in the JSON the shell takes
    for argv in (["info", str(composite)], ["verify", str(composite)]):
        try:
            code = main([*argv, "--source-storage-options", json.dumps(wrong)])
        except SystemExit as exited:
            code = int(exited.code or 0)
        err = capsys.readouterr().err
        assert code == 4, err
        assert """--source-storage-options '{"a": {...}}'""" in err
        assert "source_storage_options=" not in err
        assert len(err.strip().splitlines()) == 1
    # and the Python form is back once the command is done
    with pytest.raises(OSError, match=r"source_storage_options=\{'a'"):
        cv.open_store(composite, source_storage_options=wrong)


def test_write_from_a_remote_anndata_to_a_remote_destination(
    remote: dict[str, str],
    s3_server: S3Server,
    tmp_path: Path,
    counts: sp.csr_array,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``write INPUT DEST``: ``--source-storage-options`` open the AnnData INPUT,
    ``--storage-options`` the new store."""
    import anndata as ad
    import obstore
    from anndata_files import write_anndata_zarr
    from obstore.store import S3Store

    data = ad.AnnData(X=sp.csr_matrix(counts).astype("float32"))
    data.obs_names = [f"c{i}" for i in range(counts.shape[0])]
    local = write_anndata_zarr(data, tmp_path / "in.zarr", 3)
    raw = S3Store(remote["bucket"], **s3_server.storage_options())
    for file in local.rglob("*"):
        if file.is_file():
            obstore.put(raw, f"in.zarr/{file.relative_to(local).as_posix()}", file.read_bytes())
    source = f"s3://{remote['bucket']}/in.zarr"
    destination = f"s3://{remote['bucket']}/written.zarr"
    options = ["--storage-options", remote["options"]]
    code, payload = _run(
        ["write", source, destination, *options, "--source-storage-options", remote["options"]],
        capsys,
    )
    assert code == 0 and payload["shape"] == [90, 30], payload
    reader = cv.VirtualArrayReader(destination, storage_options=json.loads(remote["options"]))
    assert (reader.read() == counts.toarray()).all()
    # without the input's options its endpoint is unknown: one line, exit 4, no secret
    code, payload = _run(["write", source, str(tmp_path / "x.zarr")], capsys)
    assert code in (2, 4) and "s3cr3t" not in json.dumps(payload), payload
    assert not (tmp_path / "x.zarr").exists()
    # given by source name, as composite takes them: the backend said only
    # "Configuration key 'wu' is not valid"; now the form write takes, and no secret
    by_name = json.dumps({"wu": json.loads(remote["options"])})
    code, payload = _run(
        ["write", source, str(tmp_path / "y.zarr"), "--source-storage-options", by_name], capsys
    )
    message = payload["message"]
    assert code == 2 and "--source-storage-options maps 'wu' to options" in message, payload
    assert "write reads one source and takes its options themselves" in message, payload
    assert "s3cr3t" not in message and not (tmp_path / "y.zarr").exists()


def test_a_mounts_source_remedy_names_the_options_of_a_mount(
    s3_server: S3Server,
    remote: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A mount has one source: its options are ``{...}``, never ``{"source": {...}}``."""
    mount = tmp_path / "m.zarr"
    cv.mount_datastore(remote["a"], mount, source_storage_options=s3_server.storage_options())
    wrong = json.dumps(s3_server.unreachable_options())
    for argv in (["info", str(mount)], ["verify", str(mount)], ["artifacts", str(mount)]):
        code = main([*argv, "--source-storage-options", wrong])
        err = capsys.readouterr().err
        assert code == 4, err
        assert "--source-storage-options '{...}'" in err, err
        assert '"source"' not in err and "Future exception" not in err, err
        assert "fix the cause" not in err, err  # the cause's own remedy, said once
        assert len(err.strip().splitlines()) == 1, err


def test_array_commands_on_a_remote_array(
    remote: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    # the array command took no --storage-options, while its errors named them as the remedy
    import numpy as np
    import zarr

    from cytearc_vfs.remote.locations import open_location

    location = f"s3://{remote['bucket']}/arrays.zarr"
    options = json.loads(remote["options"])
    store = open_location(location, read_only=False, storage_options=options)
    array = zarr.create_array(store, name="t", shape=(5, 4), chunks=(2, 2), dtype="i2")
    array[:] = np.arange(20).reshape(5, 4)
    zarr.consolidate_metadata(store)  # kept: removed while each change runs, then restored
    own = ["--storage-options", remote["options"]]
    code, payload = _run(["array", "info", location, "t", *own], capsys)
    assert code == 0 and payload["array"]["shape"] == [5, 4], payload
    code, payload = _run(
        ["array", "resize", location, "t", "--low=2,0", "--high=0,-1", *own], capsys
    )
    assert code == 0 and payload["shapeAfter"] == [7, 3], payload
    assert payload["unconsolidated"] == payload["reconsolidated"] == ["/"], payload
    code, payload = _run(["array", "promote", location, "t", "--dimension", "0", *own], capsys)
    assert code == 0 and payload["shapeAfter"] == [1, 7, 3], payload
    assert payload["reconsolidated"] == ["/"], payload
    code, payload = _run(["array", "recover", location, "t", *own], capsys)
    assert code == 0 and payload["finished"] is False, payload
    reopened = zarr.open_array(
        open_location(location, read_only=True, storage_options=options), path="t", mode="r"
    )
    assert reopened[0, 2:].tolist() == np.arange(20).reshape(5, 4)[:, :3].tolist()
    consolidated = zarr.open_consolidated(
        open_location(location, read_only=True, storage_options=options), mode="r"
    )
    assert consolidated["t"].shape == (1, 7, 3)


@pytest.mark.parametrize(
    "command",
    [
        ["info", "MISSING"],
        ["verify", "MISSING"],
        ["artifacts", "MISSING"],
        ["repack", "MISSING", "NEW"],
        ["mount", "MISSING", "NEW"],
        ["composite", "NEW", "a=MISSING"],
    ],
    ids=lambda words: words[0],
)
def test_a_remote_path_that_holds_nothing_does_not_exist(
    command: list[str],
    remote: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A mistyped store name in a bucket was "a directory without Zarr metadata (no
    zarr.json)", sending the user to look for a directory and its metadata; nothing
    is stored there, which is what a local path that does not exist is told."""
    missing = f"s3://{remote['bucket']}/a-typo.zarr"
    option = (
        "--source-storage-options"
        if command[0] in ("mount", "composite")
        else ("--storage-options")
    )
    value = remote["options"] if command[0] != "composite" else f'{{"a": {remote["options"]}}}'
    argv = [
        {"MISSING": missing, "NEW": str(tmp_path / "new.zarr"), "a=MISSING": f"a={missing}"}.get(
            word, word
        )
        for word in command
    ]
    code, payload = _run([*argv, option, value], capsys)
    assert code == 2, payload
    assert f"{missing} does not exist" in payload["message"], payload
    assert "check the path" in payload["message"]
    assert "directory" not in payload["message"]
    assert not (tmp_path / "new.zarr").exists()


@pytest.mark.parametrize("action", [["info"], ["resize", "--high=1"], ["recover"]])
def test_an_array_command_names_a_missing_bucket_or_store(
    action: list[str], remote: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``array`` said "no Zarr node here (no RNA/counts/zarr.json ...); check the path"
    for a bucket that does not exist (exit 2) and for a store name that holds
    nothing, where every other command names the bucket (exit 4) or says the
    location does not exist."""
    options = ["--storage-options", remote["options"]]
    command = ["array", action[0]]
    code, payload = _run(
        [*command, "s3://no-such-bucket-9/a.zarr", "RNA/counts", *action[1:], *options], capsys
    )
    assert code == 4, payload
    assert "bucket does not exist" in payload["message"], payload
    missing = f"s3://{remote['bucket']}/a-typo.zarr"
    code, payload = _run([*command, missing, "RNA/counts", *action[1:], *options], capsys)
    assert code == 2, payload
    assert f"{missing} does not exist" in payload["message"], payload
    # an existing store's missing node is still that
    code, payload = _run([*command, remote["a"], "RNA/nothing", *action[1:], *options], capsys)
    assert code == 2 and "no Zarr node here" in payload["message"], payload


def test_options_without_credentials_are_said_to_lack_them(
    remote: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Options that name the endpoint but no credentials (the keys forgotten) sent obstore
    to the cloud's instance metadata service for some, which is refused or does not
    answer off the cloud: the line said "the credentials given may not read or list it",
    though none were given, or "nothing answered at that address ... check that the
    endpoint is right", though the endpoint was. It says the credentials are missing."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    given = json.loads(remote["options"])
    keyless = {
        key: value
        for key, value in given.items()
        if key not in ("access_key_id", "secret_access_key")
    }
    # the metadata service on a closed port: refused at once, as off the cloud (where
    # 169.254.169.254 does not answer) but without waiting for a timeout
    keyless["metadata_endpoint"] = "http://127.0.0.1:9"
    keyless["retry_config"] = {"max_retries": 0}
    for argv in (
        ["info", remote["a"], "--storage-options", json.dumps(keyless)],
        ["anndata", "ls", remote["a"], "--storage-options", json.dumps(keyless)],
    ):
        code, payload = _run(argv, capsys)
        assert code == 4, payload
        message = payload["message"]
        assert "no credentials were found" in message, message
        assert "--storage-options" in message, message
        assert "credentials given" not in message and "endpoint is right" not in message


def test_a_local_composite_s_source_options_given_as_its_own_are_redirected(
    remote: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``cytearc-vfs export both.zarr out.h5ad --storage-options @s3.json`` (the sources'
    options given to the local composite's flag) said "backend options were given for
    the local path 'both.zarr', which takes none: ... leave them out for a local store":
    true, but the user's options were meant for the sources, and the line named no flag
    that takes them."""
    options = json.loads(remote["options"])
    composite = str(tmp_path / "both.zarr")
    code, payload = _run(
        [
            "composite",
            composite,
            f"a={remote['a']}",
            "--source-storage-options",
            json.dumps({"a": options}),
        ],
        capsys,
    )
    assert code == 0, payload
    mount = str(tmp_path / "m.zarr")
    code, payload = _run(
        ["mount", remote["a"], mount, "--source-storage-options", remote["options"]], capsys
    )
    assert code == 0, payload
    for location, example in ((composite, "'{\"NAME\": {...}}'"), (mount, "'{...}'")):
        for command in (
            ["info", location],
            ["verify", location],
            ["artifacts", location],
            ["export", location, str(tmp_path / "out.h5ad")],
            ["serve", location],
            ["mount-fs", location, str(tmp_path)],
        ):
            code, payload = _run([*command, "--storage-options", remote["options"]], capsys)
            message = payload["message"]
            assert code == 2, payload
            assert f"--source-storage-options {example}" in message, message
            assert "leave" in message and options["secret_access_key"] not in message
            assert not (tmp_path / "out.h5ad").exists()
