// Read one array of a local Zarr v3 directory store with zarrita, for
// tests/interop (the reader-compatibility harness).
//
//   node read_zarr.mjs STORE ARRAY_PATH VALUES_FILE
//
// STORE is a local directory or an http(s):// URL of a store's root.
//
// Prints one JSON line on stdout: {"zarrita": version, "shape": [...],
// "stride": [...], "data_type": <the array's Zarr data type>, "values":
// "raw-le" | "json"}. Numeric and bool values go to VALUES_FILE as their raw
// little-endian bytes as zarrita holds them (bool as one byte per value),
// because JSON would turn uint64 into imprecise doubles and is slow for a
// million values; string values go there as a JSON list of strings. The
// stride (in elements) places each value: zarrita lays out an array with a
// transpose codec in that codec's order, not in C order.
//
// Any error is printed on stderr and the exit code is 1: the harness records
// the first line of stderr as the reader's outcome.

import { readFile, writeFile } from "node:fs/promises";
import { endianness } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import FileSystemStore from "@zarrita/storage/fs";
import * as zarr from "zarrita";

async function zarritaVersion() {
  // The version of the copy that is really imported, not the one asked for.
  const here = fileURLToPath(new URL(".", import.meta.url));
  const meta = JSON.parse(await readFile(join(here, "node_modules/zarrita/package.json"), "utf8"));
  return meta.version;
}

function isStringArray(data) {
  return data instanceof zarr.UnicodeStringArray || data instanceof zarr.ByteStringArray;
}

async function main(argv) {
  if (argv.length !== 3) {
    throw new Error("usage: node read_zarr.mjs STORE ARRAY_PATH VALUES_FILE");
  }
  const [storeDir, arrayPath, valuesFile] = argv;
  if (endianness() !== "LE") {
    // typed arrays are in the host's byte order; the harness reads little-endian
    throw new Error(`this host is ${endianness()}-endian; the harness expects little-endian`);
  }
  // an http(s) URL of a store's root reads over fetch (node >= 18 has it)
  const store = /^https?:\/\//.test(storeDir)
    ? new zarr.FetchStore(storeDir)
    : new FileSystemStore(storeDir);
  const array = await zarr.open(zarr.root(store).resolve(arrayPath), { kind: "array" });
  const chunk = await zarr.get(array);
  let values;
  if (isStringArray(chunk.data)) {
    await writeFile(valuesFile, JSON.stringify(Array.from(chunk.data)));
    values = "json";
  } else if (Array.isArray(chunk.data)) {
    // object arrays (variable-length strings) come back as plain JS arrays
    await writeFile(valuesFile, JSON.stringify(chunk.data));
    values = "json";
  } else {
    const data = chunk.data;
    await writeFile(valuesFile, new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    values = "raw-le";
  }
  const out = {
    zarrita: await zarritaVersion(),
    shape: chunk.shape,
    stride: chunk.stride,
    data_type: array.dtype,
    values,
  };
  process.stdout.write(JSON.stringify(out) + "\n");
}

main(process.argv.slice(2)).catch((err) => {
  // the first line is what the harness reports; the cause chain helps a human
  let message = String(err && err.message ? `${err.name}: ${err.message}` : err);
  let cause = err && err.cause;
  while (cause) {
    message += `\n  caused by: ${cause && cause.message ? `${cause.name}: ${cause.message}` : cause}`;
    cause = cause.cause;
  }
  process.stderr.write(message + "\n");
  process.exit(1);
});
