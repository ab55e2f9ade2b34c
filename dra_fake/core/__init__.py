"""The driver-agnostic plugin core: claims and their errors, the prepared-claims state with its
lock, checkpoint and start-up reconciliation, CDI spec files, ResourceSlice publishing, the kube
client, retries, events, metrics, logs, and serving a driver to the kubelet. It never imports a
driver (make lint checks it)."""
