// gonvml lists the GPUs (and MIG devices) NVML shows this process, through NVIDIA's go-nvml
// bindings, as JSON: what a Go monitoring agent or device plugin reads. dra-fake runs it in
// pods to prove its libnvidia-ml.so.1 answers Go programs, and beside NVIDIA's library on a real
// GPU for the comparison (hack/nvml).
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

type device struct {
	Index        int               `json:"index"`
	Name         string            `json:"name"`
	UUID         string            `json:"uuid"`
	Serial       string            `json:"serial,omitempty"`
	BusID        string            `json:"busId"`
	MemoryTotal  uint64            `json:"memoryTotal"`
	MemoryUsed   uint64            `json:"memoryUsed"`
	MemoryFree   uint64            `json:"memoryFree"`
	GPUUtil      uint32            `json:"gpuUtil"`
	MemUtil      uint32            `json:"memUtil"`
	Temperature  uint32            `json:"temperature"`
	PowerMilliW  uint32            `json:"powerMilliW"`
	PowerLimitMW uint32            `json:"powerLimitMilliW"`
	SMClock      uint32            `json:"smClock"`
	MemClock     uint32            `json:"memClock"`
	PState       int               `json:"pstate"`
	ComputeCap   string            `json:"computeCap"`
	MigCurrent   int               `json:"migCurrent"`
	MigDevices   []migDevice       `json:"migDevices,omitempty"`
	Errors       map[string]string `json:"errors,omitempty"`
}

type migDevice struct {
	UUID        string `json:"uuid"`
	Name        string `json:"name"`
	GI          int    `json:"gi"`
	CI          int    `json:"ci"`
	MemoryTotal uint64 `json:"memoryTotal"`
	SMs         uint32 `json:"sms"`
}

type report struct {
	Driver  string   `json:"driver"`
	NVML    string   `json:"nvml"`
	CUDA    int      `json:"cuda"`
	Count   int      `json:"count"`
	Devices []device `json:"devices"`
}

func main() {
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		fmt.Fprintf(os.Stderr, "nvml.Init: %v\n", nvml.ErrorString(ret))
		os.Exit(1)
	}
	defer nvml.Shutdown()
	var r report
	r.Driver, _ = nvml.SystemGetDriverVersion()
	r.NVML, _ = nvml.SystemGetNVMLVersion()
	r.CUDA, _ = nvml.SystemGetCudaDriverVersion()
	count, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		fmt.Fprintf(os.Stderr, "nvml.DeviceGetCount: %v\n", nvml.ErrorString(ret))
		os.Exit(1)
	}
	r.Count = count
	for i := 0; i < count; i++ {
		h, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			fmt.Fprintf(os.Stderr, "nvml.DeviceGetHandleByIndex(%d): %v\n", i, nvml.ErrorString(ret))
			os.Exit(1)
		}
		r.Devices = append(r.Devices, describe(i, h))
	}
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", " ")
	if err := out.Encode(r); err != nil {
		os.Exit(1)
	}
}

func describe(i int, h nvml.Device) device {
	d := device{Index: i, Errors: map[string]string{}}
	note := func(what string, ret nvml.Return) {
		if ret != nvml.SUCCESS {
			d.Errors[what] = nvml.ErrorString(ret)
		}
	}
	var ret nvml.Return
	d.Name, ret = h.GetName()
	note("name", ret)
	d.UUID, ret = h.GetUUID()
	note("uuid", ret)
	d.Serial, ret = h.GetSerial()
	note("serial", ret)
	pci, ret := h.GetPciInfo()
	note("pci", ret)
	d.BusID = busID(pci.BusId)
	mem, ret := h.GetMemoryInfo()
	note("memory", ret)
	d.MemoryTotal, d.MemoryUsed, d.MemoryFree = mem.Total, mem.Used, mem.Free
	util, ret := h.GetUtilizationRates()
	note("utilization", ret)
	d.GPUUtil, d.MemUtil = util.Gpu, util.Memory
	d.Temperature, ret = h.GetTemperature(nvml.TEMPERATURE_GPU)
	note("temperature", ret)
	d.PowerMilliW, ret = h.GetPowerUsage()
	note("power", ret)
	d.PowerLimitMW, ret = h.GetEnforcedPowerLimit()
	note("powerLimit", ret)
	d.SMClock, ret = h.GetClockInfo(nvml.CLOCK_SM)
	note("smClock", ret)
	d.MemClock, ret = h.GetClockInfo(nvml.CLOCK_MEM)
	note("memClock", ret)
	ps, ret := h.GetPerformanceState()
	note("pstate", ret)
	d.PState = int(ps)
	major, minor, ret := h.GetCudaComputeCapability()
	note("computeCap", ret)
	d.ComputeCap = fmt.Sprintf("%d.%d", major, minor)
	current, _, ret := h.GetMigMode()
	note("migMode", ret)
	d.MigCurrent = current
	if current == nvml.DEVICE_MIG_ENABLE {
		n, ret := h.GetMaxMigDeviceCount()
		note("maxMigDeviceCount", ret)
		for j := 0; j < n; j++ {
			m, ret := h.GetMigDeviceHandleByIndex(j)
			if ret == nvml.ERROR_NOT_FOUND {
				continue
			}
			note(fmt.Sprintf("migHandle%d", j), ret)
			if ret != nvml.SUCCESS {
				continue
			}
			var md migDevice
			md.UUID, _ = m.GetUUID()
			md.Name, _ = m.GetName()
			md.GI, _ = m.GetGpuInstanceId()
			md.CI, _ = m.GetComputeInstanceId()
			mm, _ := m.GetMemoryInfo()
			md.MemoryTotal = mm.Total
			attrs, _ := m.GetAttributes()
			md.SMs = attrs.MultiprocessorCount
			d.MigDevices = append(d.MigDevices, md)
		}
	}
	if len(d.Errors) == 0 {
		d.Errors = nil
	}
	return d
}

func busID(raw [32]int8) string {
	b := make([]byte, 0, len(raw))
	for _, c := range raw {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}
