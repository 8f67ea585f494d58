//===- OpTableBase.td - the classes of the artifact's op table -*- tablegen -*-===//
//
// The vocabulary of OpTable.td. lib/Runtime/Artifact/OpTableGen.py reads
// the records (llvm-tblgen --dump-json) and generates every per-opcode
// piece of the runtime and of moec's writer from them;
// docs/adding-an-opcode.md says how.
//
//===----------------------------------------------------------------------===//

// Element types of a buffer (Program.fbs DType).
class DType<string n> { string name = n; }
def F32 : DType<"F32">;
def I32 : DType<"I32">;
def BF16 : DType<"BF16">;

// An operand or result. `shape` is a pattern matched by the verifier
// (lib/Runtime/Artifact/ShapePattern.h), written "[..., K]": "..." binds the
// leading dims of an activation (at least one), a name binds one dim and
// must agree everywhere after, a number is fixed, "$attr" is the value of an
// int attribute, and "=name" is exactly the shape of an operand named
// before. An empty shape is checked by one of the op's `rules` instead.
class Tensor<string shapePattern = "", list<DType> types = [F32]> {
  string shape = shapePattern;
  list<DType> dtypes = types;
  // The dtype of the operand of that name (with `dtypes` listing the ones
  // allowed); "" for none.
  string dtypeOf = "";
  // At most one entry of the operands, and one of the results, may be
  // optional or variadic: the last.
  bit optional = 0;
  bit variadic = 0;
}
class Ids<string shapePattern = ""> : Tensor<shapePattern, [I32]>;
// A float tensor mixed precision may store in BF16 (Tensor stays fp32:
// router logits and probabilities, attention statistics, losses, optimizer
// operands). Kernels compute in fp32 whatever the operands' dtypes.
class Float<string shapePattern = ""> : Tensor<shapePattern, [F32, BF16]>;
def Scalar : Tensor<"[]">;
class OptionalTensor<string shapePattern = "", list<DType> types = [F32]>
    : Tensor<shapePattern, types> {
  let optional = 1;
}
class Variadic<string shapePattern = "", list<DType> types = [F32]>
    : Tensor<shapePattern, types> {
  let variadic = 1;
}
class SameDType<string operand, string shapePattern = "",
                list<DType> types = [F32, BF16, I32]>
    : Tensor<shapePattern, types> {
  let dtypeOf = operand;
}

// An enum attribute's cases, encoded as their values.
class EnumCase<string n, int v> { string name = n; int value = v; }
class Enum<string n, list<EnumCase> c> { string name = n; list<EnumCase> cases = c; }

// A named attribute. Int, Bool, Enum and Group attributes are encoded in
// Instruction.int_attrs, Float ones in float_attrs, each in the order the
// op lists them, an absent optional one taking no slot.
class Attr<string k> {
  string kind = k;
  // A C++ condition on the value ("$_ > 0"; "$name" is another attribute
  // of the op) and the requirement it prints when it fails.
  string constraint = "";
  string requirement = "";
  // Attributes of one optional set are present or absent together; the
  // generator checks that the attribute counts tell which sets are present.
  string optionalSet = "";
  // One value per operand (of a variadic op): all of them or, when
  // optional, none. Named in the singular; the view's accessor is the
  // plural ("group" gives groups()).
  bit perOperand = 0;
  Enum enumType = ?;
}
class IntAttr<string c = "", string r = ""> : Attr<"int"> {
  let constraint = c;
  let requirement = r;
}
class FloatAttr<string c = "", string r = ""> : Attr<"float"> {
  let constraint = c;
  let requirement = r;
}
def BoolAttr : Attr<"bool">;
class EnumAttr<Enum e> : Attr<"enum"> { let enumType = e; }
// An index into Program.groups.
def GroupAttr : Attr<"group">;
// A group index, or -1 for none.
def GroupOrNoneAttr : Attr<"group_or_none">;

class OptionalAttr<string set, Attr base> : Attr<base.kind> {
  let constraint = base.constraint;
  let requirement = base.requirement;
  let enumType = base.enumType;
  let optionalSet = set;
}
class PerOperand<Attr base, bit isOptional = 0> : Attr<base.kind> {
  let perOperand = 1;
  let optionalSet = !if(isOptional, "per_operand", "");
}

def ins;
def outs;
def attrs;

// One opcode. The value is the opcode's number in the artifact; values are
// never reused or renumbered (the artifact records the table it was
// written with, see OpTableCheck.cpp).
class Op<int v, string since = "1.0"> {
  int value = v;
  string version = since;
  dag operands = (ins);
  dag results = (outs);
  dag attributes = (attrs);
  // The kernel may write a result over one of its operands.
  bit inPlace = 0;
  // An instruction with a group attribute calls the communication layer
  // over it (Slice only takes its block of the group).
  bit communicates = 1;
  // Hand-written checks of lib/Runtime/Artifact/InstructionRules.cpp, run
  // after the operands' shapes and before the results'.
  list<string> rules = [];
}
