"""A Dask LocalCluster (spawn workers, the default) runs a task holding dict_keys. argv[1]:
"with" (mpcompat where the workers run) or "absent" (mpcompat imported here from argv[2],
then taken off sys.path: the workers, started with this sys.path, cannot import it); argv[3]: how
long to wait for the result (s). Prints a JSON report."""
import json
import sys

if __name__ == "__main__":
    if sys.argv[1] == "absent":
        sys.path.insert(0, sys.argv[2])
        import mpcompat
        sys.path.remove(sys.argv[2])
    else:
        import mpcompat
    from distributed import Client, LocalCluster
    from distributed.protocol.pickle import dumps

    views = {"car": 1, "bus": 2}.keys()
    report = {"active": mpcompat.is_active(),
              "payload_names_mpcompat": b"mpcompat.rebuild_views" in dumps(views)}
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        try:
            report["result"] = client.submit(sorted, views).result(timeout=float(sys.argv[3]))
        except Exception as exc:
            report["error"] = "%s: %s" % (type(exc).__name__, exc)
    print("REPORT " + json.dumps(report), flush=True)
