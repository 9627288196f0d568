package pci

// Type-0 configuration header layout (PCI Local Bus Specification 3.0,
// §6.1 and §6.2).
const (
	Size = 256 // bytes of conventional configuration space

	OffVendorID    = 0x00 // 16
	OffDeviceID    = 0x02 // 16
	OffCommand     = 0x04 // 16
	OffStatus      = 0x06 // 16
	OffRevision    = 0x08 // 8
	OffClassCode   = 0x09 // 24: programming interface, subclass, class
	OffHeaderType  = 0x0e // 8
	OffBAR0        = 0x10 // 6 x 32
	OffSubVendorID = 0x2c // 16
	OffSubDeviceID = 0x2e // 16
	OffROM         = 0x30 // 32: expansion ROM BAR
	OffCapPtr      = 0x34 // 8
	OffIntLine     = 0x3c // 8
	OffIntPin      = 0x3d // 8

	NumBARs = 6
)

// Command register bits (§6.2.2).
const (
	CommandIO          = 1 << 0
	CommandMemory      = 1 << 1
	CommandBusMaster   = 1 << 2
	CommandINTxDisable = 1 << 10

	commandWritable = CommandIO | CommandMemory | CommandBusMaster | CommandINTxDisable
)

// Status register bits (§6.2.3).
const (
	StatusInterrupt = 1 << 3 // INTx asserted (read-only, device-driven)
	StatusCapList   = 1 << 4
)

// Memory BAR type bits, the low four bits of a BAR (§6.2.5.1).
const (
	BARMem64        = 0x4 // bits 2:1 = 10b: 64-bit, the next BAR holds the high half
	BARPrefetchable = 0x8
	barFlagsMask    = 0xf
)

// MSI capability (§6.8.1): placed at MSIOffset, the only capability, with a
// 64-bit message address, one vector and no per-vector masking.
const (
	CapIDMSI  = 0x05
	MSIOffset = 0x50

	OffMSIControl = MSIOffset + 0x2 // 16
	OffMSIAddrLo  = MSIOffset + 0x4 // 32, bits 1:0 reserved
	OffMSIAddrHi  = MSIOffset + 0x8 // 32
	OffMSIData    = MSIOffset + 0xc // 16

	MSIControlEnable = 1 << 0
	MSIControl64Bit  = 1 << 7
)
