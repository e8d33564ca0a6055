# attnc.mk: compile attnc specs into objects from a Makefile (GNU make 4.3+).
#
#   ATTNC_SPECS    := model.attn             # spec files (required)
#   ATTNC_VARIANTS := llama3_8b              # variant names (default: ask `attnc check`)
#   ATTNC_OUT      := attnc-out              # output directory (default attnc-out)
#   include path/to/attnc/make/attnc.mk
#
#   app: app.c $(ATTNC_OBJS)                 # one object per variant
#   	$(CC) -I$(ATTNC_OUT) -o $@ app.c $(ATTNC_OBJS) -lm -lpthread
#   app.c: | $(ATTNC_HEADERS)                # <variant>.h before compiling
#
# Variables you may set: ATTNC (the attnc command, default attnc),
# ATTNC_FLAGS (extra `attnc build` flags, e.g. --triple ... or
# --cpu-levels=host for this machine's CPU level only), ATTNC_OPT and
# ATTNC_LLC (LLVM 14's opt and llc: /usr/lib/llvm-14/bin when it exists,
# else from PATH). One `attnc build` writes every variant's .ll and .h and
# manifest.json; opt -O3 and llc -O3 make each .ll an object. The build also
# writes $(ATTNC_OUT)/attnc.d (make-format dependencies on the specs).

# The rules below must not become the including Makefile's default goal.
attnc_saved_goal := $(.DEFAULT_GOAL)

ATTNC ?= attnc
ATTNC_OUT ?= attnc-out
ATTNC_FLAGS ?=
ATTNC_LLVM_BIN ?= /usr/lib/llvm-14/bin
ATTNC_OPT ?= $(if $(wildcard $(ATTNC_LLVM_BIN)/opt),$(ATTNC_LLVM_BIN)/opt,opt)
ATTNC_LLC ?= $(if $(wildcard $(ATTNC_LLVM_BIN)/llc),$(ATTNC_LLVM_BIN)/llc,llc)

ifeq ($(strip $(ATTNC_SPECS)),)
$(error attnc.mk: set ATTNC_SPECS to your .attn files before including it)
endif
ifeq ($(strip $(ATTNC_VARIANTS)),)
ATTNC_VARIANTS := $(shell $(ATTNC) check $(ATTNC_SPECS) | sed -n 's/^ok //p')
endif

ATTNC_LL := $(ATTNC_VARIANTS:%=$(ATTNC_OUT)/%.ll)
ATTNC_HEADERS := $(ATTNC_VARIANTS:%=$(ATTNC_OUT)/%.h)
ATTNC_OBJS := $(ATTNC_VARIANTS:%=$(ATTNC_OUT)/%.o)

$(ATTNC_LL) $(ATTNC_HEADERS) $(ATTNC_OUT)/manifest.json &: $(ATTNC_SPECS)
	$(ATTNC) build $(ATTNC_SPECS) --target cpu $(ATTNC_FLAGS) -o $(ATTNC_OUT) --depfile $(ATTNC_OUT)/attnc.d

$(ATTNC_OUT)/%.o: $(ATTNC_OUT)/%.ll
	$(ATTNC_OPT) -O3 $< -o $(@:.o=.bc)
	$(ATTNC_LLC) -O3 -relocation-model=pic -filetype=obj $(@:.o=.bc) -o $@

-include $(ATTNC_OUT)/attnc.d

.DEFAULT_GOAL := $(attnc_saved_goal)
