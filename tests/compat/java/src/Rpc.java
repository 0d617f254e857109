final class Rpc {
    static void request() throws Exception { throw new UnsupportedOperationException("request"); }
    static void trace() throws Exception { throw new UnsupportedOperationException("trace"); }
    static void acl() throws Exception { throw new UnsupportedOperationException("acl"); }
}
