# nvidia-smi (native/smi): one static program on the NVML library's static archive, so that it
# runs in images without a C library. Included by native/Makefile, which defines BUILD (the output
# directory), NVML_ARCHIVE (the library's static archive), NVML_INCLUDE and CFLAGS.
SMI_SRC := $(wildcard smi/*.c)
SMI_OBJ := $(patsubst smi/%.c,$(BUILD)/smi/%.o,$(SMI_SRC))
SMI_HDR := $(wildcard smi/*.h) $(NVML_INCLUDE)/nvml.h

$(BUILD)/nvidia-smi: $(SMI_OBJ) $(NVML_ARCHIVE)
	$(CC) -static -o $@ $(SMI_OBJ) $(NVML_ARCHIVE)

$(BUILD)/smi/%.o: smi/%.c $(SMI_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(NVML_INCLUDE) -Ismi -c $< -o $@
