final class Consumers {
    static void push() throws Exception { throw new UnsupportedOperationException("push"); }
    static void retry() throws Exception { throw new UnsupportedOperationException("retry"); }
    static void badSql() throws Exception { throw new UnsupportedOperationException("badSql"); }
}
