"""The chart's RBAC and admission policy against the real control plane, and the chart's objects
validated with kubeconform against schemas of this API server (issue 5 §2). On both beds (the
`chart` fixture, chart.py): on kind against the cluster's Helm release, with tokens of the chart's
ServiceAccounts bound to its real plugin and controller pods; on the harness as follows.

A dedicated local cluster (2 harness nodes, no plugins) gets everything `helm template` renders for
it: namespace objects, ServiceAccount, ClusterRole(Binding), ValidatingAdmissionPolicy(+Binding),
DeviceClasses, inventory ConfigMap, metrics Service and the kubelet-plugin DaemonSet, whose pods
the harness nodes "run" (no containers). Each node's GPU plugin then runs as a host process with a
kubeconfig holding a service-account token of the chart's ServiceAccount, issued by the TokenRequest
API and bound to that node's DaemonSet pod (so the token names the node, as in a real pod), with the
inventory from the chart's ConfigMap. The tests prove the plugin works with exactly these rights,
that other rights are refused, and that a node's plugin cannot touch another node's ResourceSlices.

ComputeDomains the same way: the chart's CRDs are applied, each node's compute-domain plugin runs
with the same pod-bound token as its GPU plugin (one pod, two containers, one ServiceAccount), the
controller with a token of its ServiceAccount bound to the chart's controller pod (leader election
on), and the IMEX daemon pods, which the harness execs, with a token of the daemon ServiceAccount.
The harness would exec the chart's own pods too (their command is `dra-fake ...`); their commands
are made inert before applying, so only the processes started here run (with the chart's rights).

The cluster and the installed chart are this package's fixtures (conftest.py: started once for all
its files, stopped after the last); what they share is in bed.py and chart.py, the longer checks in
checks.py. The rule-by-rule tests (test_rules) start their probe plugins as processes of this
machine on either bed, against a Node object of their own. The files, in the order pytest runs them:
test_chart_schemas (kubeconform), test_compute_domains (the ComputeDomain components' rights),
test_gpu_plugin (the GPU plugin's rights), test_policies (the admission policies, each account on
its own objects), test_rules (every rule is needed) and test_uninstall_hook, last: it removes the
GPU Feature Discovery labels that test_gpu_plugin reads (on kind it then restarts the plugins, which
write them again).

Needs helm and kubeconform built by `hack/install-tools.sh` (`make chart-check` does it and runs
this package); without them its tests are skipped, unless DRA_FAKE_REQUIRE_TOOLS=1 (then they fail).
"""
