import { fromBinary, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";

/**
 * How messages become bytes and back on the fast paths: protobuf-es's `toBinary` and `fromBinary`
 * unless the caller gives another that writes the same bytes and reads the same messages (the
 * services give @ledger/common's `encodeBinary` and `decodeBinary`, which skip protobuf-es's
 * per-message garbage). A decode that throws is a parse error, refused as Connect refuses it.
 */
export interface BinaryCodec {
  encode<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): Uint8Array;
  decode<Desc extends DescMessage>(schema: Desc, bytes: Uint8Array): MessageShape<Desc>;
}

export const protobufEsCodec: BinaryCodec = {
  encode: (schema, message) => toBinary(schema, message),
  decode: (schema, bytes) => fromBinary(schema, bytes),
};
