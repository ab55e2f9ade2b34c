package main

import (
	"fmt"
	"sort"
	"strings"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// podRecord is written to <state>/pods/<ns>_<name>_<uid>.json for tests and the demo.
type podRecord struct {
	Namespace  string                     `json:"namespace"`
	Name       string                     `json:"name"`
	UID        string                     `json:"uid"`
	Containers map[string]containerRecord `json:"containers"`
}

// containerRecord is what a CDI-enabled runtime would do to the container.
type containerRecord struct {
	CDIDevices  []string    `json:"cdiDevices"`
	Env         []string    `json:"env,omitempty"`
	Mounts      []oci.Mount `json:"mounts,omitempty"`
	DeviceNodes []string    `json:"deviceNodes,omitempty"`
	Hooks       int         `json:"hooks,omitempty"`
}

// resolveCDI injects the devices into an empty OCI spec with the official CDI library,
// as containerd or CRI-O would: unresolvable IDs and invalid specs are errors.
func resolveCDI(cdiRoot string, devices []string) (containerRecord, error) {
	rec := containerRecord{CDIDevices: devices}
	if len(devices) == 0 {
		return rec, nil
	}
	reg, err := cdi.NewCache(cdi.WithSpecDirs(cdiRoot), cdi.WithAutoRefresh(false))
	if err != nil && reg == nil {
		return rec, err
	}
	_ = reg.Refresh() // per-spec errors are reported below, for the specs that matter
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	unresolved, err := reg.InjectDevices(spec, devices...)
	if err != nil {
		var specErrs []string
		for path, errs := range reg.GetErrors() {
			for _, e := range errs {
				specErrs = append(specErrs, fmt.Sprintf("%s: %v", path, e))
			}
		}
		sort.Strings(specErrs)
		if len(specErrs) > 0 {
			return rec, fmt.Errorf("%w (unresolved %v; spec errors: %s)", err, unresolved, strings.Join(specErrs, "; "))
		}
		return rec, err
	}
	rec.Env = spec.Process.Env
	rec.Mounts = spec.Mounts
	for _, d := range spec.Linux.Devices {
		rec.DeviceNodes = append(rec.DeviceNodes, d.Path)
	}
	if spec.Hooks != nil {
		rec.Hooks = len(spec.Hooks.Prestart) + len(spec.Hooks.CreateRuntime) + len(spec.Hooks.CreateContainer) + len(spec.Hooks.StartContainer) + len(spec.Hooks.Poststart)
	}
	return rec, nil
}
